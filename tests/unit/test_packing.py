"""A one-stack model computes its position-wise layers on the real tokens only (model.packing): the same logits,
log-probs and gradients as the padded computation, under every position scheme and both architectures."""

from __future__ import annotations

import pytest
import torch

from seqlab.data.sequences import pad_right
from seqlab.model import ModelConfig, build_model
from seqlab.model import packing as packing_module
from seqlab.model.packing import Packing

VARIANTS = [dict(), dict(positions="learned"), dict(positions="rope", norm="rmsnorm", gated_ffn=True,
                                                    activation="silu", kv_heads=2),
            dict(positions="alibi"), dict(positions="t5"), dict(architecture="prefix_lm")]


def model_and_batch(**variant):
    torch.manual_seed(0)
    values = dict(src_vocab_size=40, d_model=32, n_heads=4, encoder_layers=0, decoder_layers=2, d_ff=48,
                  dropout=0.0, max_positions=32, architecture="decoder_only") | variant
    model = build_model(ModelConfig(**values))
    src, pad = pad_right([[5, 6, 7, 8, 9, 3], [10, 11, 3], [12, 3], [13, 14, 15, 16, 3]], model.cfg.pad_id)
    tgt_in = torch.randint(4, 40, (4, 5))
    return model, src, pad, tgt_in


def unpacked(monkeypatch):
    """Packing switched off: every layer computes every padded slot, as before packing existed."""
    monkeypatch.setattr(packing_module.Packing, "of", classmethod(lambda cls, valid: None))


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(f"{k}={x}" for k, x in v.items()) or "default")
def test_packed_layers_give_the_padded_computations_numbers(monkeypatch, variant):
    model, src, pad, tgt_in = model_and_batch(**variant)
    packed_logits = model(src, pad, tgt_in)
    packed_logits.float().logsumexp(-1).sum().backward()
    packed_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    unpacked(monkeypatch)
    logits = model(src, pad, tgt_in)
    logits.float().logsumexp(-1).sum().backward()
    assert torch.allclose(packed_logits, logits, atol=1e-5)
    for name, p in model.named_parameters():
        if p.grad is not None:
            assert torch.allclose(packed_grads[name], p.grad, atol=1e-5), name


def test_packing_is_skipped_where_it_saves_nothing_and_round_trips_otherwise():
    assert Packing.of(torch.ones(3, 4, dtype=torch.bool)) is None  # no padding
    assert Packing.of(torch.tensor([[True], [False]])) is None  # one token a row: a decoding step
    valid = torch.tensor([[True, True, False], [True, False, False]])
    packing = Packing.of(valid)
    x = torch.arange(12.0).view(2, 3, 2)
    rows = packing.pack(x)
    assert rows.tolist() == [[0.0, 1.0], [2.0, 3.0], [6.0, 7.0]]
    assert packing.unpack(rows).tolist() == (x * valid[:, :, None]).tolist()


ENCODER_VARIANTS = [dict(), dict(positions="t5", norm="rmsnorm"), dict(norm_position="post"),
                    dict(positions="rope", gated_ffn=True, activation="silu")]


@pytest.mark.parametrize("variant", ENCODER_VARIANTS,
                         ids=lambda v: "-".join(f"{k}={x}" for k, x in v.items()) or "default")
def test_an_encoder_at_inference_computes_the_real_tokens_only_with_the_padded_numbers(monkeypatch, variant):
    """The encoder's memory at every real token, and a greedy search over it, as without packing; the layers
    saw the real tokens' rows only."""
    from seqlab.decoding import DecodingConfig, generate

    torch.manual_seed(0)
    model = build_model(ModelConfig(src_vocab_size=40, d_model=32, n_heads=4, encoder_layers=2,
                                    decoder_layers=2, d_ff=48, dropout=0.0, max_positions=32, **variant)).eval()
    src, pad = pad_right([[5, 6, 7, 8, 9, 3], [10, 11, 3], [12, 3], [13, 14, 15, 16, 3]], model.cfg.pad_id)
    rows = []
    model.encoder_layers[0].ffn.register_forward_hook(lambda m, args, out: rows.append(args[0].shape[0]))
    decoding = DecodingConfig(method="greedy", max_length=8)
    with torch.no_grad():
        packed, searched = model.encode(src, pad), generate(model, src, pad, decoding)
        assert rows[0] == int((~pad).sum())  # (R, d): the 15 real tokens, not 4 x 6 slots
        unpacked(monkeypatch)
        plain, plain_search = model.encode(src, pad), generate(model, src, pad, decoding)
    assert rows[-1] == src.shape[0]  # (B, T, d)
    assert torch.allclose(packed[~pad], plain[~pad], atol=1e-5)
    assert torch.equal(searched.sequences, plain_search.sequences)


def test_an_encoder_keeps_the_padded_layout_in_training_and_for_an_empty_source():
    from seqlab.model.transformer import encoder_packing

    pad = torch.tensor([[False, True], [False, False]])
    assert encoder_packing(pad) is not None
    assert encoder_packing(torch.tensor([[False, True], [True, True]])) is None  # the second source is empty
    torch.manual_seed(0)
    model = build_model(ModelConfig(src_vocab_size=40, d_model=32, n_heads=4, encoder_layers=1,
                                    decoder_layers=1, d_ff=48, dropout=0.0, max_positions=32))
    shapes = []
    model.encoder_layers[0].ffn.register_forward_hook(lambda m, args, out: shapes.append(tuple(args[0].shape)))
    model.train()(torch.tensor([[5, 3], [6, 3]]), pad, torch.tensor([[4, 5], [4, 6]]))
    assert shapes == [(2, 2, 32)]
