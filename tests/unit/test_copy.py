"""Copy attention (pointer-generator): the mixture against a direct computation, training, generation.

Its cache, beam grouping and parameter count are checked with the other variants in test_model.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from seqlab.decoding import DecodingConfig, generate, score
from seqlab.model import ConfigError, ModelConfig, Seq2SeqTransformer
from seqlab.train.losses import label_smoothed_nll
from tests.unit.test_model import batch, tiny


def copy_model() -> Seq2SeqTransformer:
    torch.manual_seed(0)
    return Seq2SeqTransformer(tiny("pre", tie="all", copy_attention=True)).eval()


def test_output_is_the_mixture_computed_directly():
    model = copy_model()
    src, pad, tgt = batch(model.cfg)
    seen = {}
    model.pointer.register_forward_hook(lambda mod, args, out: seen.update(h=args[0], logits=args[1]))
    with torch.no_grad():
        out = model(src, pad, tgt)
        memory = model.encode(src, pad)
    h, logits, ptr = seen["h"], seen["logits"], model.pointer
    expected = torch.zeros_like(out)
    for b in range(src.shape[0]):
        allowed = [s for s in range(src.shape[1]) if not pad[b, s]]
        keys = ptr.key(memory[b])  # (S, d)
        for t in range(tgt.shape[1]):
            q = ptr.query(h[b, t])
            scores = torch.stack([q @ keys[s] / math.sqrt(model.cfg.d_model) for s in allowed])
            attn = scores.softmax(0)
            gen = torch.sigmoid(ptr.gate(h[b, t]))[0]
            p = gen * logits[b, t].softmax(-1)
            for a, s in zip(attn, allowed, strict=True):
                p[src[b, s]] += (1 - gen) * a
            expected[b, t] = p.log()
    assert (out - expected).abs().max() <= 1e-5
    assert (out.exp().sum(-1) - 1).abs().max() <= 1e-5  # a distribution


def test_copy_needs_source_ids_and_a_joint_vocabulary():
    model = copy_model()
    src, pad, tgt = batch(model.cfg)
    with pytest.raises(ValueError, match="pass src_ids"):
        model.decode(tgt, model.encode(src, pad), pad)
    with pytest.raises(ConfigError, match="copy_attention=true copies source ids"):
        ModelConfig(src_vocab_size=50, tgt_vocab_size=60, d_model=16, n_heads=4, tie_embeddings="decoder",
                    copy_attention=True)


def test_copy_model_learns_to_copy_unseen_tokens_fast():
    """Copy a random sequence of tokens: the pointer learns it in a few dozen steps; the plain model does not."""

    def train(copy: bool) -> float:
        torch.manual_seed(0)
        cfg = ModelConfig(src_vocab_size=64, d_model=32, n_heads=4, encoder_layers=1, decoder_layers=1, d_ff=64,
                          dropout=0.0, norm_position="pre", tie_embeddings="all", copy_attention=copy)
        model = Seq2SeqTransformer(cfg)
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        g = torch.Generator().manual_seed(0)
        for _ in range(40):
            src = torch.randint(4, 64, (32, 6), generator=g)
            tgt = torch.cat([src, torch.full((32, 1), cfg.eos_id)], 1)
            tgt_in = torch.cat([torch.full((32, 1), cfg.bos_id), src], 1)
            loss, _, n = label_smoothed_nll(model(src, torch.zeros_like(src, dtype=torch.bool), tgt_in), tgt, 0.0)
            opt.zero_grad()
            (loss / n).backward()
            opt.step()
        return float(loss.detach() / n)

    with_copy, without = train(True), train(False)
    assert with_copy < 0.5 * without, (with_copy, without)


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_generate_with_copy(method):
    model = copy_model()
    src, pad, _ = batch(model.cfg)
    cfg = DecodingConfig(method=method, num_beams=4 if method == "beam" else 1, max_length=8)
    out = generate(model, src, pad, cfg)
    best = out.sequences[:, 0]
    assert (out.token_logprobs[:, 0] - score(model, src, pad, best)).abs().max() <= 1e-4
    one = DecodingConfig(method="beam", num_beams=1, max_length=8)
    greedy = generate(model, src, pad, DecodingConfig(method="greedy", max_length=8))
    assert torch.equal(generate(model, src, pad, one).sequences, greedy.sequences)
