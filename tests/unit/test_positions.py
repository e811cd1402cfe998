"""Position schemes against their papers and public implementations, computed here, not from seqlab's code:
RoPE (Su et al. 2021; Hugging Face's rotate-half `apply_rotary_pos_emb`), ALiBi's slopes (Press et al. 2022;
BLOOM's `build_alibi_tensor`), T5's buckets (Hugging Face T5's `_relative_position_bucket`); the absolute
schemes bit for bit as before relative positions existed."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from seqlab.decoding import DecodingConfig, generate
from seqlab.model import ConfigError, ModelConfig, Seq2SeqTransformer
from seqlab.model.params import analytic_counts, count_parameters
from seqlab.model.positions import RotaryPositions, alibi_slopes, rotate, t5_bucket

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "absolute_positions" / "models.pt"


def cfg(**kw) -> ModelConfig:
    base = dict(src_vocab_size=50, d_model=32, n_heads=4, encoder_layers=2, decoder_layers=2, d_ff=32, dropout=0.0,
                max_positions=64)
    return ModelConfig(**{**base, **kw})


def su_rotation(x: torch.Tensor, positions: torch.Tensor, base: float, rotary_dim: int) -> torch.Tensor:
    """Su et al. (2021), eq. 34, as a complex product: the pair (x_i, x_{i + R/2}) is one complex number
    multiplied by exp(1j * m * base^(-2i/R)) at position m; dimensions past R pass through."""
    half = rotary_dim // 2
    theta = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / rotary_dim)
    z = torch.complex(x[..., :half].double(), x[..., half:rotary_dim].double())
    z = z * torch.polar(torch.ones_like(theta), positions.double()[:, None] * theta)
    return torch.cat([z.real, z.imag, x[..., rotary_dim:].double()], dim=-1).float()


@pytest.mark.parametrize(("head_dim", "rotary_dim", "base"), [(8, 8, 10000.0), (16, 8, 500.0), (6, 6, 10000.0)])
def test_rope_is_the_papers_rotation(head_dim, rotary_dim, base):
    model_cfg = cfg(d_model=head_dim * 2, n_heads=2, positions="rope", rope_dim=rotary_dim, rope_base=base)
    x = torch.randn(2, 2, 5, head_dim)
    start = 3
    rotary = RotaryPositions(model_cfg)(start, 5, start + 5).rotary
    expected = su_rotation(x, torch.arange(start, start + 5), base, rotary_dim)
    assert torch.allclose(rotate(x, rotary), expected, atol=1e-5)


def test_rope_equals_hugging_faces_rotate_half():
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    model_cfg = cfg(positions="rope")  # head dim 8
    q, k = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)
    rotary = RotaryPositions(model_cfg)(0, 6, 6).rotary
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, 8, 2).float() / 8)
    freqs = torch.arange(6).float()[:, None] * inv_freq
    emb = torch.cat([freqs, freqs], dim=-1)[None]  # (1, T, Dh): Hugging Face's layout
    hf_q, hf_k = llama.apply_rotary_pos_emb(q, k, emb.cos(), emb.sin())
    assert torch.allclose(rotate(q, rotary), hf_q, atol=1e-6)
    assert torch.allclose(rotate(k, rotary), hf_k, atol=1e-6)


def test_rope_scores_depend_on_the_distance_alone():
    model_cfg = cfg(positions="rope")
    module = RotaryPositions(model_cfg)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)

    def score(m: int, n: int) -> float:
        return float((rotate(q, module(m, 1, m + 1).rotary) * rotate(k, module(n, 1, n + 1).rotary)).sum())

    assert score(7, 3) == pytest.approx(score(24, 20), abs=1e-5)
    assert score(7, 3) != pytest.approx(score(7, 4), abs=1e-3)


@pytest.mark.parametrize("heads", [1, 2, 4, 6, 8, 12, 16, 20])
def test_alibi_slopes_are_the_papers(heads):
    """2^k heads: 2^(-8/n), 2^(-16/n), ...; otherwise the power of two below, then every other slope of
    twice that many (Press et al. 2022, section 3 and their released code)."""
    lower = 2 ** math.floor(math.log2(heads))
    expected = [2 ** (-8 * (i + 1) / lower) for i in range(lower)]
    expected += [2 ** (-8 * (i + 1) / (2 * lower)) for i in range(0, 2 * lower, 2)][: heads - lower]
    assert alibi_slopes(heads) == pytest.approx(expected, rel=1e-12)
    if heads == 8:
        assert alibi_slopes(8) == pytest.approx([1 / 2 ** i for i in range(1, 9)])


@pytest.mark.parametrize("heads", [4, 6, 12])
def test_alibi_slopes_equal_blooms(heads):
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    alibi = bloom.build_alibi_tensor(torch.ones(1, 2), heads, torch.float32)  # (H, 1, 2): slope x position
    assert torch.allclose(torch.tensor(alibi_slopes(heads)), alibi[:, 0, 1], atol=1e-7)


def test_alibi_bias_is_symmetric_in_the_encoder_and_causal_in_the_decoder():
    model = Seq2SeqTransformer(cfg(positions="alibi")).eval()
    enc = model.encoder_positions(0, 5, 5).bias[0]  # (H, T, S)
    assert torch.equal(enc, enc.transpose(-1, -2))
    assert enc[0, 1, 4] == pytest.approx(-alibi_slopes(4)[0] * 3)
    dec = model.decoder_positions(3, 1, 4).bias[0, :, 0]  # query at position 3 over keys 0..3
    assert torch.allclose(dec, -torch.tensor(alibi_slopes(4))[:, None] * torch.tensor([3.0, 2, 1, 0]))


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("buckets", "max_distance"), [(32, 128), (16, 40), (8, 20)])
def test_t5_buckets_equal_hugging_faces(bidirectional, buckets, max_distance):
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    relative = torch.arange(-300, 301)[None, :] - torch.arange(0, 3)[:, None]
    expected = t5.T5Attention._relative_position_bucket(relative, bidirectional, buckets, max_distance)
    assert torch.equal(t5_bucket(relative, bidirectional, buckets, max_distance), expected)


def test_t5_one_table_per_stack_shared_by_its_layers():
    model_cfg = cfg(positions="t5", t5_buckets=16, t5_max_distance=64)
    model = Seq2SeqTransformer(model_cfg)
    tables = [m for m in model.modules() if type(m).__name__ == "T5Positions"]
    assert len(tables) == 2 and tables[0].bidirectional and not tables[1].bidirectional
    assert tuple(tables[0].bias.weight.shape) == (16, 4)
    assert count_parameters(model) == analytic_counts(model_cfg)
    assert analytic_counts(model_cfg).positions == 2 * 16 * 4


SCHEMES = ["sinusoidal", "learned", "rope", "alibi", "t5", "none"]


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("positions", SCHEMES)
def test_relative_schemes_cached_equal_full_and_padding_changes_nothing(norm, positions):
    model = Seq2SeqTransformer(cfg(norm_position=norm, positions=positions)).eval()
    g = torch.Generator().manual_seed(3)
    src, tgt = torch.randint(4, 50, (3, 9), generator=g), torch.randint(4, 50, (3, 7), generator=g)
    pad = torch.zeros(3, 9, dtype=torch.bool)
    pad[0, 5:] = True
    src[pad] = 0
    with torch.no_grad():
        memory = model.encode(src, pad)
        full, _ = model.decode(tgt, memory, pad)
        cache = model.start_cache(memory, pad)
        _, cache = model.decode(tgt[:, :2], None, None, cache)  # a prefix, then one step at a time
        steps = [model.decode(tgt[:, t : t + 1], None, None, cache)[0] for t in range(2, 7)]
        assert (torch.cat(steps, 1) - full[:, 2:]).abs().max() <= 1e-5
        for i in range(3):  # each sentence alone, unpadded, gives its row of the padded batch
            n = int((~pad[i]).sum())
            alone = model(src[i : i + 1, :n], pad[i : i + 1, :n], tgt[i : i + 1])
            assert (alone[0] - full[i]).abs().max() <= 1e-5


@pytest.mark.parametrize("positions", ["rope", "alibi", "t5"])
def test_relative_schemes_math_attention_equals_the_fused_kernel(positions):
    models = {}
    for kernel in ("sdpa", "math"):
        torch.manual_seed(0)
        models[kernel] = Seq2SeqTransformer(cfg(positions=positions, attention_kernel=kernel))
    src, tgt = torch.randint(4, 50, (2, 6)), torch.randint(4, 50, (2, 5))
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True
    out = {k: m(src, pad, tgt) for k, m in models.items()}
    assert (out["sdpa"] - out["math"]).abs().max() <= 1e-5
    for m in models.values():
        out[m.cfg.attention_kernel].float().logsumexp(-1).sum().backward()
    grads = {k: torch.cat([p.grad.flatten() for p in m.parameters()]) for k, m in models.items()}
    assert (grads["sdpa"] - grads["math"]).abs().max() <= 1e-5
    with torch.autocast("cpu", dtype=torch.bfloat16):  # bf16 keeps 8 bits of mantissa
        low = {k: m(src, pad, tgt).float() for k, m in models.items()}
    scale = out["sdpa"].abs().max()
    assert (low["sdpa"] - low["math"]).abs().max() <= 0.05 * scale
    assert (low["math"] - out["math"]).abs().max() <= 0.05 * scale


@pytest.mark.parametrize("positions", ["rope", "alibi", "t5", "none"])
def test_beam_search_equals_per_example_decoding(positions):
    model = Seq2SeqTransformer(cfg(positions=positions)).eval()
    torch.manual_seed(1)
    src = torch.randint(4, 50, (3, 8))
    pad = torch.zeros(3, 8, dtype=torch.bool)
    pad[2, 5:] = True
    src[pad] = 0
    decoding = DecodingConfig(method="beam", num_beams=4, max_length=10)
    batched = generate(model, src, pad, decoding)
    for i in range(3):
        n = int((~pad[i]).sum())
        alone = generate(model, src[i : i + 1, :n], pad[i : i + 1, :n], decoding)
        width = alone.sequences.shape[-1]
        assert torch.equal(batched.sequences[i, 0, :width], alone.sequences[0, 0])
        assert batched.scores[i, 0] == pytest.approx(float(alone.scores[0, 0]), abs=1e-5)


def test_absolute_schemes_give_the_same_outputs_as_before():
    """Models written before relative positions existed rebuild from their stored config and weights
    (strictly: no new parameter or buffer) and give the same logits and the very same searches. On the CPU
    that wrote the fixture the logits are the same bits; another CPU's fp32 products sum in another order
    (an Intel Xeon's MKL against an AMD EPYC's: 1e-6 apart), so the logits and scores are held to 1e-5."""
    stored = torch.load(FIXTURE, weights_only=True)
    src, pad, tgt = stored["batch"]
    for name, entry in stored["models"].items():
        model = Seq2SeqTransformer(ModelConfig.from_dict(entry["model_config"])).eval()
        model.load_state_dict(entry["state_dict"], strict=True)
        with torch.no_grad():
            torch.testing.assert_close(model(src, pad, tgt), entry["logits"], rtol=0, atol=1e-5, msg=name)
            greedy = generate(model, src, pad, DecodingConfig(method="greedy", max_length=12))
            beam = generate(model, src, pad, DecodingConfig(method="beam", num_beams=5, max_length=12))
        assert torch.equal(greedy.sequences, entry["greedy"]), name
        assert torch.equal(beam.sequences, entry["beam"]), name
        torch.testing.assert_close(beam.scores, entry["beam_scores"], rtol=0, atol=1e-5, msg=name)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"positions": "sinusoidal", "rope_base": 500.0}, "model.rope_base=500.0 is a setting of model.positions=rope"),
        ({"positions": "alibi", "t5_buckets": 16}, "model.t5_buckets=16 is a setting of model.positions=t5"),
        ({"positions": "rope", "t5_max_distance": 64}, "model.t5_max_distance=64"),
        ({"positions": "rope", "rope_dim": 7}, "model.rope_dim=7 must be even and at most the head dimension"),
        ({"positions": "rope", "rope_dim": 16}, "head dimension d_model / n_heads = 8"),
        ({"positions": "rope", "d_model": 36, "n_heads": 4}, "head dimension 9 is odd"),
        ({"positions": "rope", "rope_base": 1.0}, "model.rope_base=1.0 must be greater than 1"),
        ({"positions": "t5", "t5_buckets": 10}, "model.t5_buckets=10 must be a multiple of 4"),
        ({"positions": "t5", "t5_buckets": 32, "t5_max_distance": 8}, "model.t5_max_distance=8 must exceed"),
        ({"positions": "rotary"}, "model.positions='rotary' is not valid"),
    ],
)
def test_bad_position_settings_fail_naming_the_key(overrides, message):
    with pytest.raises(ConfigError) as err:
        cfg(**overrides)
    assert message in str(err.value)


def test_scheme_settings_change_the_model():
    a = Seq2SeqTransformer(cfg(positions="rope")).eval()
    b = Seq2SeqTransformer(replace(a.cfg, rope_base=100.0)).eval()
    b.load_state_dict(a.state_dict())
    src, pad, tgt = torch.randint(4, 50, (1, 6)), torch.zeros(1, 6, dtype=torch.bool), torch.randint(4, 50, (1, 4))
    with torch.no_grad():
        assert (a(src, pad, tgt) - b(src, pad, tgt)).abs().max() > 1e-4
