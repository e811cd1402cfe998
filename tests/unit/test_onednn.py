"""engine=seqlab_onednn: the same search with the linear layers on oneDNN's packed fp32 weights."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seqlab.config import ConfigError
from seqlab.decoding import DecodingConfig, generate
from seqlab.decoding.labels import run_label
from seqlab.engines.choice import check_engine
from seqlab.model.onednn import PackedLinear, onednn_available, onednn_linears

from ..helpers import needs_onednn, toy_batch, trained_toy_model


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
def test_packed_linear_computes_the_linear_layer(bias):
    g = torch.Generator().manual_seed(0)
    linear = nn.Linear(48, 80, bias=bias)
    x = torch.randn(3, 7, 48, generator=g)  # any leading shape
    expected = F.linear(x, linear.weight, linear.bias)
    torch.testing.assert_close(PackedLinear(linear)(x), expected, rtol=1e-5, atol=1e-5)


@needs_onednn
def test_decoding_on_packed_weights_matches_the_model_and_leaves_it_untouched():
    model = trained_toy_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    packed = onednn_linears(model)
    assert isinstance(packed.output, PackedLinear) and isinstance(model.output, nn.Linear)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    src, pad, *_ = toy_batch(torch.Generator().manual_seed(1), 8, 40)
    for cfg in (DecodingConfig(max_length=8), DecodingConfig(method="beam", num_beams=4, max_length=8)):
        with torch.no_grad():
            ours, theirs = generate(model, src, pad, cfg), generate(packed, src, pad, cfg)
        assert torch.equal(ours.sequences, theirs.sequences)
        torch.testing.assert_close(ours.scores, theirs.scores, rtol=1e-5, atol=1e-5)


def test_onednn_engine_is_fp32_only_and_labelled():
    check_engine("eval", "seqlab_onednn", "fp32", DecodingConfig())
    with pytest.raises(ConfigError, match=r"eval.engine=seqlab_onednn packs fp32 weights; use eval.precision=fp32"):
        check_engine("eval", "seqlab_onednn", "int8", DecodingConfig())
    assert run_label("beam5_lp1", "fp32", "seqlab_onednn") == "beam5_lp1_onednn"
    assert run_label("greedy", "int8", "ctranslate2") == "greedy_int8_ct2"


@pytest.mark.parametrize("variant", ["onednn", "int8"])
def test_fused_feed_forward_relu_computes_the_same_layer(variant):
    """The CPU forms fuse the ReLU into the first feed-forward layer: the same numbers as the separate ReLU
    (int8: bitwise; oneDNN: within fp32 rounding of F.linear)."""
    from seqlab.model.layers import identity
    from seqlab.model.quantize import Int8Linear, dynamic_int8

    if variant == "onednn" and not onednn_available():
        pytest.skip("this torch build has no oneDNN packed linear")
    model = trained_toy_model()
    form = onednn_linears(model) if variant == "onednn" else dynamic_int8(model)
    x = torch.randn(5, model.cfg.d_model, generator=torch.Generator().manual_seed(2))
    fused_by_name = dict(form.named_modules())
    for name, plain in model.named_modules():
        if type(plain).__name__ != "FeedForward":
            continue
        fused = fused_by_name[name]
        assert fused.act is identity
        if variant == "int8":
            assert isinstance(fused.fc1, Int8Linear) and fused.fc1.relu
            unfused = Int8Linear(fused.fc1.linear, reduce_range=fused.fc1.reduce_range)
            assert torch.equal(fused.fc1(x), torch.relu(unfused(x)))
        else:
            assert fused.fc1.activation == "relu"
            torch.testing.assert_close(fused.fc1(x), torch.relu(plain.fc1(x)), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fused(x), plain(x), rtol=0.05, atol=0.05)  # int8: within quantization


def test_int8_activations_use_8_bits_only_where_products_cannot_saturate():
    """7-bit activations (PyTorch's reduce_range) unless the CPU has VNNI; where it does, 8 bits are exact
    even for products that a 16-bit pair sum (vpmaddubsw) would saturate, and closer to fp32 than 7."""
    from seqlab.hardware import cpu_flags
    from seqlab.model.quantize import Int8Linear, dynamic_int8, full_range_activations

    assert full_range_activations({"avx2", "avx512_vnni"}) and full_range_activations({"amx_int8"})
    assert not full_range_activations({"avx2", "avx512f"})
    model = trained_toy_model()
    layers = [m for m in dynamic_int8(model).modules() if isinstance(m, Int8Linear)]
    assert layers and all(m.reduce_range == (not full_range_activations()) for m in layers)
    if not full_range_activations(cpu_flags()):
        pytest.skip("no VNNI on this CPU: 7-bit activations")
    linear = nn.Linear(64, 8, bias=False)
    with torch.no_grad():
        linear.weight.fill_(1.0)  # every weight at the int8 maximum
    quantized = torch.ao.quantization.quantize_dynamic(nn.Sequential(linear), {nn.Linear}, dtype=torch.qint8)[0]
    x = torch.full((4, 64), 10.0)
    x[0, 0] = -1.0  # activations at the top of the 8-bit range: pairs of products reach 2 x 255 x 127
    exact = x @ linear.weight.T
    full, seven = (Int8Linear(quantized, reduce_range=r)(x) for r in (False, True))
    assert (full - exact).abs().max() < 0.01 * exact.abs().max()  # no saturation
    assert (full - exact).abs().max() < (seven - exact).abs().max()


@pytest.mark.parametrize("positions", ["rope", "alibi", "t5", "none"])
def test_cpu_forms_decode_relative_positions(positions):
    """The oneDNN and int8 forms swap linear layers only, so every position scheme decodes through them:
    oneDNN gives seqlab's beam (fp32 rounding apart), int8 a search of its own on the same positions."""
    from seqlab.model import ModelConfig, Seq2SeqTransformer
    from seqlab.model.quantize import dynamic_int8

    torch.manual_seed(0)
    model = Seq2SeqTransformer(ModelConfig(src_vocab_size=40, d_model=32, n_heads=4, encoder_layers=2,
                                           decoder_layers=2, d_ff=64, dropout=0.0, positions=positions)).eval()
    with torch.no_grad():
        model.output.weight.mul_(3.0)  # peaked distributions: no near-ties for rounding to break
    src, pad, *_ = toy_batch(torch.Generator().manual_seed(1), 8, 40)
    cfg = DecodingConfig(method="beam", num_beams=4, max_length=8)
    with torch.no_grad():
        ours = generate(model, src, pad, cfg)
        if onednn_available():
            packed = generate(onednn_linears(model), src, pad, cfg)
            assert torch.equal(ours.sequences, packed.sequences)
            torch.testing.assert_close(ours.scores, packed.scores, rtol=1e-5, atol=1e-5)
        int8 = generate(dynamic_int8(model), src, pad, cfg)
    assert int8.sequences.shape[:2] == ours.sequences.shape[:2] and torch.isfinite(int8.scores).all()


def test_a_compiled_int8_layer_runs_the_eager_layers_own_product():
    """torch.compile cannot take a packed int8 weight into a program, so a compiled Int8Linear passes its key to
    `seqlab::int8_linear`, which runs that layer's eager product: the compiled layer gives the eager layer's
    numbers bitwise (the ReLU-fused one too), a copy is a layer of its own (its weight changed, the compiled copy
    follows and the original does not), and a layer that is gone leaves the registry."""
    import copy
    import gc

    from seqlab.model import quantize
    from seqlab.model.quantize import Int8Linear

    linears = torch.ao.quantization.quantize_dynamic(nn.Sequential(nn.Linear(16, 8), nn.Linear(16, 8)), {nn.Linear},
                                                     dtype=torch.qint8)
    plain, fused = Int8Linear(linears[0], reduce_range=False), Int8Linear(linears[1], relu=True, reduce_range=False)
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(0))
    for layer in (plain, fused):
        assert torch.equal(torch.compile(layer, fullgraph=True)(x), layer(x))
    assert (fused(x) >= 0).all() and (plain(x) < 0).any()
    twin = copy.deepcopy(plain)
    assert twin.key != plain.key and torch.equal(twin(x), plain(x))
    bias = twin.linear.bias()
    twin.linear.set_weight_bias(torch.quantize_per_tensor(torch.zeros(8, 16), 1.0, 0, torch.qint8), bias)
    assert torch.equal(torch.compile(twin, fullgraph=True)(x), bias.expand(3, 8))
    assert torch.equal(torch.compile(plain, fullgraph=True)(x), plain(x)) and not torch.equal(plain(x), twin(x))
    keys = {twin.key, plain.key, fused.key}
    assert keys <= set(quantize._LAYERS)
    del plain, fused, twin, linears, layer
    gc.collect()
    assert not keys & set(quantize._LAYERS)
