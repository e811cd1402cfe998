"""The one-stack models (decoder-only, prefix LM): every position scheme and variant; a padded batch equals each
sequence alone; cached decoding equals recomputing the whole sequence; the searches and scoring run on them
through the same boundary as on the encoder-decoder."""

from __future__ import annotations

import pytest
import torch

from seqlab.config import ConfigError
from seqlab.data.sequences import pad_right
from seqlab.decoding import DecodingConfig, generate, score
from seqlab.model import CausalTransformer, ModelConfig, build_model
from seqlab.model.params import analytic_counts, count_parameters

VOCAB = 40
VARIANTS = [
    {}, {"positions": "learned"}, {"positions": "rope"}, {"positions": "alibi"}, {"positions": "t5"},
    {"positions": "none"}, {"norm_position": "pre", "norm": "rmsnorm", "gated_ffn": True, "activation": "silu",
                            "bias": False, "positions": "rope", "kv_heads": 2},
    {"tie_embeddings": "none", "layernorm_embedding": True, "output_bias": True}, {"qkv_bias": True, "bias": False},
]
ARCHITECTURES = ["decoder_only", "prefix_lm"]


def model_of(architecture: str, **variant) -> CausalTransformer:
    torch.manual_seed(0)
    cfg = ModelConfig(src_vocab_size=VOCAB, architecture=architecture, encoder_layers=0, decoder_layers=2,
                      d_model=16, n_heads=4, d_ff=32, dropout=0.0, max_positions=64, **variant)
    model = build_model(cfg).eval()
    with torch.no_grad():
        model.output.weight.mul_(3.0)  # peaked distributions: few near-ties
    return model


def batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(src, src_pad, tgt_in): sources of lengths 7, 3, 5 (right-padded), decoder inputs starting with BOS."""
    g = torch.Generator().manual_seed(seed)
    sources = [torch.randint(4, VOCAB, (n,), generator=g).tolist() + [3] for n in (6, 2, 4)]
    src, pad = pad_right(sources, 0)
    tgt = torch.randint(4, VOCAB, (3, 5), generator=g)
    tgt[:, 0] = 2
    return src, pad, tgt


@pytest.mark.parametrize("variant", VARIANTS, ids=[repr(v) for v in VARIANTS])
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_a_padded_batch_equals_each_sequence_alone(architecture, variant):
    model = model_of(architecture, **variant)
    src, pad, tgt = batch()
    with torch.no_grad():
        together = model(src, pad, tgt)
        for i in range(3):
            n = int((~pad[i]).sum())
            alone = model(src[i : i + 1, :n], pad[i : i + 1, :n], tgt[i : i + 1])
            assert torch.allclose(together[i], alone[0], atol=1e-5), i


@pytest.mark.parametrize("variant", VARIANTS, ids=[repr(v) for v in VARIANTS])
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_cached_decoding_equals_the_whole_sequence(architecture, variant):
    model = model_of(architecture, **variant)
    src, pad, tgt = batch(1)
    with torch.no_grad():
        full = model(src, pad, tgt)
        cache = model.start_cache(model.encode(src, pad), pad, capacity=8)
        steps = [model.decode(tgt[:, t : t + 1], None, None, cache)[0] for t in range(tgt.shape[1])]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)


def test_prefix_lm_sees_the_whole_source_and_decoder_only_does_not():
    """Changing the source's last token changes a prefix LM's states at its first source token only."""
    src, pad, tgt = batch(2)
    changed = src.clone()
    changed[0, 5] = 4 if int(src[0, 5]) != 4 else 5
    for architecture, moves in (("decoder_only", False), ("prefix_lm", True)):
        model = model_of(architecture)
        with torch.no_grad():
            states = [model.tgt_embed(s, positions=torch.arange(s.shape[1])[None]) for s in (src, changed)]
            ours = [model._stack(s, ~pad, 0, s.shape[1], None) for s in (src, changed)]
        assert torch.equal(states[0][0, 0], states[1][0, 0])
        assert (not torch.allclose(ours[0][0, 0], ours[1][0, 0])) == moves, architecture


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("decoding", [dict(), dict(method="beam", num_beams=3), dict(method="beam", num_beams=4,
                                      num_beam_groups=2, diversity_penalty=0.5), dict(method="sample", n_best=2),
                                      dict(method="contrastive", penalty_alpha=0.6, top_k=3)])
def test_every_search_runs_and_scores_match(architecture, decoding):
    """The searches decode a one-stack model through the encoder-decoder's boundary: each hypothesis's
    token log-probs equal teacher-forced scoring of it, and a batch equals each source alone."""
    model = model_of(architecture, positions="rope")
    src, pad, _ = batch(3)
    cfg = DecodingConfig(max_length=6, **decoding)
    out = generate(model, src, pad, cfg)
    n = out.sequences.shape[1]
    rows = src.repeat_interleave(n, 0), pad.repeat_interleave(n, 0)
    lps = score(model, *rows, out.sequences.view(3 * n, -1))
    within = torch.arange(out.sequences.shape[2])[None] < out.lengths.view(-1)[:, None]
    assert torch.allclose(lps * within, out.token_logprobs.view(3 * n, -1), atol=1e-4)
    if cfg.method != "sample":
        for i in range(3):
            k = int((~pad[i]).sum())
            alone = generate(model, src[i : i + 1, :k], pad[i : i + 1, :k], cfg)
            assert alone.sequences[0, 0, : alone.lengths[0, 0]].tolist() == \
                out.sequences[i, 0, : out.lengths[i, 0]].tolist()


@pytest.mark.parametrize("variant", VARIANTS, ids=[repr(v) for v in VARIANTS])
def test_the_analytic_count_is_the_counted_one(variant):
    cfg = model_of("decoder_only", **variant).cfg
    assert analytic_counts(cfg) == count_parameters(build_model(cfg))


def test_impossible_combinations_name_the_key():
    base = dict(src_vocab_size=VOCAB, architecture="decoder_only")
    with pytest.raises(ConfigError, match="model.encoder_layers=6 with model.architecture=decoder_only"):
        ModelConfig(**base)
    with pytest.raises(ConfigError, match="needs one vocabulary"):
        ModelConfig(**base, encoder_layers=0, tgt_vocab_size=30)
    with pytest.raises(ConfigError, match="copy_attention"):
        ModelConfig(**base, encoder_layers=0, copy_attention=True)
    with pytest.raises(ConfigError, match="model.kv_heads=3 must divide"):
        ModelConfig(src_vocab_size=VOCAB, kv_heads=3)


def test_seqlabs_engines_decode_a_one_stack_model_and_what_cannot_is_refused(tmp_path):
    """oneDNN's packed fp32 products give the same outputs, int8 linear layers run; the CUDA-graph step of a
    sliding-window model, a prefix LM's CTranslate2 export (its Generator is causal) and a coverage penalty (which sums
    cross-attention) are refused by name."""
    from seqlab.engines.graphs import check_graphable
    from seqlab.interop.ct2 import check_exportable
    from seqlab.interop.hf import InteropError
    from seqlab.model.onednn import onednn_available, onednn_linears
    from seqlab.model.quantize import dynamic_int8

    model = model_of("decoder_only", positions="rope")
    src, pad, _ = batch(4)
    cfg = DecodingConfig(method="beam", num_beams=3, max_length=6)
    ours = generate(model, src, pad, cfg)
    if onednn_available():
        packed = generate(onednn_linears(model), src, pad, cfg)
        assert torch.equal(packed.sequences, ours.sequences)
    assert generate(dynamic_int8(model), src, pad, cfg).sequences.shape[0] == 3
    with pytest.raises(ConfigError, match="a sliding-window model's step is not captured"):
        check_graphable(model_of("decoder_only", positions="rope", sliding_window=4))
    with pytest.raises(InteropError, match="model.architecture=prefix_lm: its source part attends to all of itself"):
        check_exportable(model_of("prefix_lm").cfg)
    with pytest.raises(ConfigError, match="decoding.coverage_penalty=wu sums cross-attention"):
        generate(model, src, pad, DecodingConfig(method="beam", num_beams=3, coverage_penalty="wu", coverage_beta=0.2))


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_forced_prefixes_constraints_forced_eos_and_ensembles_on_a_one_stack_model(architecture):
    """What the searches add around the model's step, on one stack: a forced target prefix starts every
    output; constrained beam search puts each source's constraint in its outputs; both forced-EOS rules end an
    output at its limit; an ensemble of a model with itself decodes as the model. Each output's token log-probs
    equal teacher-forced scoring of it."""
    from seqlab.decoding.ensemble import Ensemble

    model = model_of(architecture, positions="rope")
    src, pad, _ = batch(5)
    beam = DecodingConfig(method="beam", num_beams=3, max_length=7)
    prefixed = generate(model, src, pad, beam, target_prefix=[[9, 11], [], [13]])
    assert [prefixed.sequences[i, 0, :n].tolist() for i, n in enumerate((2, 0, 1))] == [[9, 11], [], [13]]
    wanted = [[[21, 22]], [[30]], []]
    constrained = generate(model, src, pad, DecodingConfig(method="beam", num_beams=4, max_length=8,
                                                           constraints="ordered"), constraints=wanted)
    for i, c in enumerate(wanted):
        out = constrained.sequences[i, 0, : constrained.lengths[i, 0]].tolist()
        assert all(any(out[j:j + len(p)] == p for j in range(len(out))) for p in c), (i, out)
    for rule in ("hf", "fairseq"):
        ended = generate(model, src, pad, DecodingConfig(method="beam", num_beams=3, max_length=4, force_eos=rule))
        assert bool((ended.sequences[torch.arange(3), 0, ended.lengths[:, 0] - 1] == model.cfg.eos_id).all()), rule
    alone, doubled = generate(model, src, pad, beam), generate(Ensemble([model, model]), src, pad, beam)
    assert torch.equal(alone.sequences, doubled.sequences)
    for out in (prefixed, constrained, alone):
        n = out.sequences.shape[1]
        lps = score(model, src.repeat_interleave(n, 0), pad.repeat_interleave(n, 0), out.sequences.view(3 * n, -1))
        within = torch.arange(out.sequences.shape[2])[None] < out.lengths.view(-1)[:, None]
        assert torch.allclose(lps * within, out.token_logprobs.view(3 * n, -1), atol=1e-4)
