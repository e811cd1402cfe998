"""The variants the pretrained families are made of (norm type, gated feed-forward, biases, attention scale,
head size, position offsets and layouts, output rescaling, input-only tying): each usable from scratch,
exact under the cache and with padding, counted by the analytic formula, computed as its definition says;
and every variant that existed before them decodes as it did (a fixture written with the earlier code)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from seqlab.decoding import DecodingConfig, generate, score
from seqlab.model import ConfigError, ModelConfig, Seq2SeqTransformer
from seqlab.model.layers import RMSNorm
from seqlab.model.params import analytic_counts, count_parameters
from seqlab.model.positions import fairseq_sinusoid_table
from seqlab.model.transformer import with_bias

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "model_variants" / "models.pt"

NEW = {
    "t5-v1.0": dict(norm="rmsnorm", bias=False, scale_attention=False, d_head=12, positions="t5",
                    norm_position="pre", scale_embedding=False, rescale_output=True, layer_norm_eps=1e-6),
    "t5-v1.1": dict(norm="rmsnorm", bias=False, scale_attention=False, d_head=6, positions="t5", norm_position="pre",
                    scale_embedding=False, tie_embeddings="inputs", activation="gelu_tanh", gated_ffn=True),
    "bart": dict(positions="learned", position_offset=2, layernorm_embedding=True, activation="gelu",
                 output_bias=True, scale_embedding=False),
    "m2m100": dict(norm_position="pre", sinusoid_layout="fairseq", position_offset=2, pad_id=1, bos_id=3,
                   eos_id=2),
    "swiglu-post": dict(activation="silu", gated_ffn=True, tie_embeddings="none"),
    "t5-decoder-start-pad": dict(bos_id=0, norm="rmsnorm", norm_position="pre"),
}


def cfg(**kw) -> ModelConfig:
    base = dict(src_vocab_size=40, d_model=16, n_heads=4, encoder_layers=2, decoder_layers=2, d_ff=24, dropout=0.0,
                max_positions=64)
    return ModelConfig(**{**base, **kw})


def perturbed(model: Seq2SeqTransformer) -> Seq2SeqTransformer:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def test_earlier_variants_decode_as_before():
    saved = torch.load(FIXTURE, weights_only=True)
    src, pad, tgt = saved["batch"]
    for name, rec in saved["models"].items():
        model = Seq2SeqTransformer(ModelConfig.from_dict(rec["model_config"]))
        model.load_state_dict(rec["state_dict"])
        model.eval()
        with torch.no_grad():
            logits = model(src, pad, tgt)
            greedy = generate(model, src, pad, DecodingConfig(method="greedy", max_length=12))
            beam = generate(model, src, pad, DecodingConfig(method="beam", num_beams=4, max_length=12))
        assert torch.allclose(logits, rec["logits"], atol=1e-5), name
        assert torch.equal(greedy.sequences, rec["greedy"]), name
        assert torch.equal(beam.sequences, rec["beam"]), name
        assert torch.allclose(beam.scores, rec["beam_scores"], atol=1e-5), name
        assert torch.allclose(greedy.token_logprobs, rec["greedy_logprobs"], atol=1e-5), name
        assert torch.allclose(beam.token_logprobs, rec["beam_logprobs"], atol=1e-5), name


@pytest.mark.parametrize("name", NEW)
def test_analytic_count_equals_the_built_model(name):
    model_cfg = cfg(**NEW[name])
    assert analytic_counts(model_cfg) == count_parameters(Seq2SeqTransformer(model_cfg))


@pytest.mark.parametrize("name", NEW)
def test_cached_decoding_and_padding_are_exact(name):
    torch.manual_seed(0)
    model_cfg = cfg(**NEW[name])
    model = perturbed(Seq2SeqTransformer(model_cfg))
    g = torch.Generator().manual_seed(3)
    src = torch.randint(4, 40, (3, 7), generator=g)
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[1, 4:] = True
    src[pad] = model_cfg.pad_id
    tgt = torch.randint(4, 40, (3, 6), generator=g)
    tgt[:, 0] = model_cfg.bos_id
    with torch.no_grad():
        full = torch.log_softmax(model(src, pad, tgt), -1)
        memory = model.encode(src, pad)
        cache = model.start_cache(memory, pad)
        steps = [model.decode(tgt[:, t : t + 1], None, None, cache)[0] for t in range(tgt.shape[1])]
        cached = torch.log_softmax(torch.cat(steps, 1), -1)
        alone = torch.log_softmax(model(src[1:2, :4], pad[1:2, :4], tgt[1:2]), -1)
    assert torch.allclose(full, cached, atol=1e-5)
    assert torch.allclose(full[1:2], alone, atol=1e-5)
    out = generate(model, src, pad, DecodingConfig(method="beam", num_beams=3, max_length=8))
    one = generate(model, src[1:2, :4], pad[1:2, :4], DecodingConfig(method="beam", num_beams=3, max_length=8))
    assert torch.equal(out.sequences[1, :, : one.sequences.shape[-1]], one.sequences[0])
    scored = score(model, src, pad, out.sequences[:, 0])
    assert scored.shape[0] == 3


def test_t5_layer_computes_t5s_formulas():
    """One pre-RMSNorm block of a bias-free, unscaled, gated-GELU-tanh model, written out by hand."""
    torch.manual_seed(1)
    model_cfg = cfg(**NEW["t5-v1.1"], encoder_layers=1)
    model = perturbed(Seq2SeqTransformer(model_cfg))
    layer = model.encoder_layers[0]
    x = torch.randn(2, 5, 16)
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    biased, _ = with_bias(mask, False, model.encoder_positions(0, 5, 5))  # as `encode` passes it

    def rms(h, w):
        return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + model_cfg.layer_norm_eps))

    h = rms(x, layer.self_attn_res.norm.weight)
    q, k, v = (t.view(2, 5, 4, 6).transpose(1, 2) for t in (h @ layer.self_attn.qkv_proj.weight.T).chunk(3, -1))
    bias = model.encoder_positions(0, 5, 5).bias
    attn = torch.softmax(q @ k.transpose(-1, -2) + bias, -1) @ v  # no 1/sqrt(d_head)
    x1 = x + attn.transpose(1, 2).reshape(2, 5, 24) @ layer.self_attn.out_proj.weight.T
    h = rms(x1, layer.ffn_res.norm.weight)
    gate, up = (h @ layer.ffn.fc1.weight.T).chunk(2, -1)
    tanh_gelu = 0.5 * gate * (1 + torch.tanh(math.sqrt(2 / math.pi) * (gate + 0.044715 * gate**3)))
    expected = x1 + (tanh_gelu * up) @ layer.ffn.fc2.weight.T
    with torch.no_grad():
        got = layer(x, biased, None)
    assert torch.allclose(got, expected, atol=1e-5)
    assert layer.self_attn.qkv_proj.bias is None and layer.ffn.fc1.bias is None


def test_rmsnorm_keeps_the_mean_and_casts_like_t5():
    norm = RMSNorm(8, 1e-6)
    x = torch.randn(3, 8) + 5.0
    expected = x / torch.sqrt((x**2).mean(-1, keepdim=True) + 1e-6)
    assert torch.allclose(norm(x), expected, atol=1e-6)
    assert norm.to(torch.bfloat16)(x.bfloat16()).dtype == torch.bfloat16


def test_fairseq_sinusoids_are_fairseqs_formula():
    table = fairseq_sinusoid_table(10, 8, pad_row=1)
    for p in (0, 2, 9):
        for i in range(4):
            f = math.exp(-i * math.log(10000) / 3)
            assert table[p, i].item() == pytest.approx(math.sin(p * f), abs=1e-6)
            assert table[p, 4 + i].item() == pytest.approx(math.cos(p * f), abs=1e-6)
    assert bool((table[1] == 0).all())


def test_offset_positions_read_past_the_offset():
    model = Seq2SeqTransformer(cfg(positions="learned", position_offset=2))
    assert model.src_embed.positions.weight.shape == (66, 16)
    assert torch.equal(model.src_embed.positions(3, 2), model.src_embed.positions.weight[5:7])


def test_rescaled_output_and_input_tying():
    model = Seq2SeqTransformer(cfg(tie_embeddings="inputs", rescale_output=True))
    assert model.src_embed.tokens is model.tgt_embed.tokens
    assert model.output.weight is not model.tgt_embed.tokens.weight
    assert model.output_scale == pytest.approx(16**-0.5)


def test_gated_ffn_is_act_of_gate_times_up():
    torch.manual_seed(0)
    model = Seq2SeqTransformer(cfg(activation="silu", gated_ffn=True))
    ffn = model.encoder_layers[0].ffn
    x = torch.randn(2, 3, 16)
    w_gate, w_up = ffn.fc1.weight.chunk(2, 0)
    b_gate, b_up = ffn.fc1.bias.chunk(2, 0)
    expected = (F.silu(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up)) @ ffn.fc2.weight.T + ffn.fc2.bias
    assert torch.allclose(ffn(x), expected, atol=1e-6)


@pytest.mark.parametrize(("kw", "names"), [
    (dict(norm="batchnorm"), "model.norm"),
    (dict(activation="gelu_fast"), "model.activation"),
    (dict(d_head=0), "model.d_head"),
    (dict(position_offset=2, positions="rope"), "model.position_offset"),
    (dict(sinusoid_layout="fairseq", positions="learned"), "model.sinusoid_layout"),
    (dict(tie_embeddings="inputs", tgt_vocab_size=30), "model.tie_embeddings=inputs"),
])
def test_invalid_combinations_name_the_key(kw, names):
    with pytest.raises(ConfigError, match=names.replace(".", r"\.")):
        cfg(**kw)


def test_d_head_frees_d_model_from_the_head_count():
    model_cfg = cfg(d_model=18, n_heads=4, d_head=5, positions="learned")
    model = Seq2SeqTransformer(model_cfg)
    assert model.encoder_layers[0].self_attn.qkv_proj.weight.shape == (60, 18)
    assert analytic_counts(model_cfg) == count_parameters(model)


@pytest.mark.parametrize("name", NEW)
def test_the_cpu_engines_decode_every_new_variant(name):
    """seqlab_onednn (packed fp32 linears, fused ReLU) decodes as seqlab; int8 runs (its outputs may differ)."""
    from seqlab.model.onednn import onednn_available, onednn_linears
    from seqlab.model.quantize import dynamic_int8

    torch.manual_seed(0)
    model = perturbed(Seq2SeqTransformer(cfg(**NEW[name])))
    src = torch.randint(4, 40, (2, 6))
    pad = torch.zeros(2, 6, dtype=torch.bool)
    decoding = DecodingConfig(method="beam", num_beams=3, max_length=8)
    expected = generate(model, src, pad, decoding)
    if onednn_available():
        packed = generate(onednn_linears(model), src, pad, decoding)
        assert torch.equal(packed.sequences, expected.sequences)
    assert generate(dynamic_int8(model), src, pad, decoding).sequences.shape[0] == 2


def test_learned_positions_start_where_position_init_says():
    from seqlab.model.positions import sinusoid_table

    torch.manual_seed(0)
    small = Seq2SeqTransformer(cfg(positions="learned", d_model=64)).src_embed.positions.weight
    unit = Seq2SeqTransformer(cfg(positions="learned", d_model=64, position_init="unit")).src_embed.positions.weight
    table = Seq2SeqTransformer(cfg(positions="learned", position_init="sinusoid")).src_embed.positions.weight
    assert abs(small.std().item() - 64**-0.5) < 0.01 and abs(unit.std().item() - 1.0) < 0.05
    assert torch.equal(table.detach(), sinusoid_table(64, 16))
    with pytest.raises(ConfigError, match=r"model\.position_init=unit starts a learned table"):
        cfg(position_init="unit")
