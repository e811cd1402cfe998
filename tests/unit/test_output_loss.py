"""The output projection fused with the label-smoothed loss (`train.fused_loss`) against the unfused path:
the same loss, NLL and gradients of every parameter, in fp32 and under bf16 autocast."""

from __future__ import annotations

import pytest
import torch

from seqlab.model import ModelConfig, Seq2SeqTransformer
from seqlab.train import output_loss
from seqlab.train.losses import label_smoothed_nll
from seqlab.train.output_loss import CPU_MIN_ROWS, block_loss, blocks, fused_label_smoothed_nll

VARIANTS = {
    "tied": {},
    "untied_with_bias": {"tie_embeddings": "none", "output_bias": True},
    "t5_rescaled": {"tie_embeddings": "all", "rescale_output": True, "norm": "rmsnorm", "bias": False,
                    "activation": "gelu_tanh", "gated_ffn": True},
}


def model_and_batch(variant: str, seed: int = 0):
    cfg = ModelConfig(src_vocab_size=53, d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=2,
                      dropout=0.0, **VARIANTS[variant])
    torch.manual_seed(seed)
    model = Seq2SeqTransformer(cfg)
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 53, (3, 6), generator=g)
    tgt_in = torch.randint(4, 53, (3, 5), generator=g)
    tgt = torch.randint(4, 53, (3, 5), generator=g)
    tgt[1, 3:] = cfg.pad_id
    return model, src, torch.zeros_like(src, dtype=torch.bool), tgt_in, tgt


def grads(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def unfused(model, src, pad, tgt_in, tgt, eps):
    return label_smoothed_nll(model(src, pad, tgt_in), tgt, eps, model.cfg.pad_id)


def fused(model, src, pad, tgt_in, tgt, eps, compiled=False):
    h = model.output_states(src, pad, tgt_in)
    return fused_label_smoothed_nll(h, model.output.weight, model.output.bias, tgt, eps, model.cfg.pad_id,
                                    compiled=compiled)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_fused_loss_and_every_gradient_equal_the_unfused_path_in_fp32(monkeypatch, variant, eps):
    import seqlab.train.losses as losses

    monkeypatch.setattr(losses, "BLOCK_ELEMENTS", 4 * 53)
    monkeypatch.setattr(output_loss, "CPU_MIN_ROWS", 1)  # blocks of 4 rows: several blocks, one partial
    model, src, pad, tgt_in, tgt = model_and_batch(variant)
    ref_loss, ref_nll, ref_n = unfused(model, src, pad, tgt_in, tgt, eps)
    ref = grads(model, ref_loss / ref_n)
    loss, nll, n = fused(model, src, pad, tgt_in, tgt, eps)
    ours = grads(model, loss / n)
    assert n == ref_n == 13
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-6)
    assert nll.item() == pytest.approx(ref_nll.item(), rel=1e-6)
    assert ours.keys() == ref.keys()
    for name, g in ref.items():
        torch.testing.assert_close(ours[name], g, rtol=1e-5, atol=1e-7, msg=name)


def test_fused_loss_under_bf16_autocast_is_within_bf16_rounding_of_the_unfused_path():
    model, src, pad, tgt_in, tgt = model_and_batch("untied_with_bias", seed=1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref_loss, ref_nll, ref_n = unfused(model, src, pad, tgt_in, tgt, 0.1)
    ref = grads(model, ref_loss / ref_n)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, nll, n = fused(model, src, pad, tgt_in, tgt, 0.1)
    ours = grads(model, loss / n)
    assert loss.dtype == torch.float32 and loss.item() == pytest.approx(ref_loss.item(), rel=1e-3)
    assert nll.item() == pytest.approx(ref_nll.item(), rel=1e-3)
    for name, g in ref.items():
        assert ours[name].dtype == torch.float32
        scale = g.abs().max().clamp(min=1e-6)
        assert (ours[name] - g).abs().max() / scale < 2e-2, name


def test_fused_loss_scales_with_the_upstream_gradient_and_the_nll_is_not_differentiable(monkeypatch):
    model, src, pad, tgt_in, tgt = model_and_batch("tied", seed=2)
    loss, nll, n = fused(model, src, pad, tgt_in, tgt, 0.1)
    once = torch.autograd.grad(loss, model.output.weight, retain_graph=True)[0]
    thrice = torch.autograd.grad(3.0 * loss, model.output.weight)[0]
    torch.testing.assert_close(thrice, 3.0 * once)
    assert not nll.requires_grad
    gradients = []  # the logits' gradient is made with scatter_add_ (its target term), and nothing else is
    scatter = torch.Tensor.scatter_add_
    monkeypatch.setattr(torch.Tensor, "scatter_add_", lambda t, *a: gradients.append(t.shape) or scatter(t, *a))
    with torch.no_grad():  # validation: the same values, and no gradient computed
        again, again_nll, _ = fused(model, src, pad, tgt_in, tgt, 0.1)
    assert again.item() == pytest.approx(loss.item(), rel=1e-6) and again_nll.item() == nll.item()
    assert gradients == []
    fused(model, src, pad, tgt_in, tgt, 0.1)
    assert gradients, "with grad mode on, the gradient is computed in the forward pass"


def test_gpu_blocks_are_at_least_four_and_cover_every_row_once():
    """Transformer-base's batch: a handful of blocks on a GPU, each under the unfused logits' size."""
    n, vocab = 12_288, 37_000
    found = blocks(n, vocab, torch.device("cuda"))
    assert 4 <= len(found) <= 8
    assert [i for b in found for i in range(b.start, b.stop)] == list(range(n))
    assert blocks(10, vocab, torch.device("cuda"))[0] == slice(0, 3)


def test_cpu_blocks_are_cache_sized_but_never_below_the_minimum_rows_and_cover_every_row_once():
    """A block's projection reads the whole output weight: a 250k vocabulary's cache-sized blocks (2 rows) take
    CPU_MIN_ROWS rows instead; a small vocabulary keeps its cache-sized blocks where they are larger."""
    cpu = torch.device("cpu")
    for n, vocab in [(300, 250_027), (1000, 1000), (5, 250_027)]:
        got = blocks(n, vocab, cpu)
        assert [i for b in got for i in range(b.start, b.stop)] == list(range(n))
        want = max(CPU_MIN_ROWS, output_loss.losses.BLOCK_ELEMENTS // vocab)
        assert all(b.stop - b.start == want for b in got[:-1]) and got[-1].stop - got[-1].start <= want


def test_a_copy_attention_model_refuses_the_fused_loss_by_name():
    cfg = ModelConfig(src_vocab_size=53, d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1,
                      copy_attention=True)
    model = Seq2SeqTransformer(cfg)
    src = torch.randint(4, 53, (2, 4))
    with pytest.raises(ValueError, match="copy attention"):
        model.output_states(src, torch.zeros_like(src, dtype=torch.bool), src)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_blocks_arithmetic_out_of_place_is_the_in_place_one(dtype):
    """What `train.compile=loss` compiles (`inplace=False`) computes what the eager block does in place: the
    same loss, NLL and logits' gradient, in the logits' dtype."""
    g = torch.Generator().manual_seed(3)
    logits = (torch.randn(7, 53, generator=g) * 4).to(dtype)
    target, keep = torch.randint(0, 53, (7,), generator=g), torch.tensor([1, 1, 0, 1, 1, 1, 0], dtype=torch.bool)
    eps_i = 0.1 / 52
    eager = block_loss(logits.clone(), target, keep, 1 - 0.1 - eps_i, eps_i, True)
    written_out = block_loss(logits.clone(), target, keep, 1 - 0.1 - eps_i, eps_i, True, inplace=False)
    for a, b in zip(eager, written_out, strict=True):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert eager[2].dtype == dtype and eager[2][2].abs().max() == 0  # an uncounted row has no gradient
    assert block_loss(logits, target, keep, 1 - 0.1 - eps_i, eps_i, False)[2] is None


@pytest.mark.slow
def test_the_compiled_fused_loss_keeps_the_loss_and_every_gradient(monkeypatch):
    """`train.compile=loss`: each block through torch.compile (inductor on this CPU) gives the eager fused
    loss's values and gradients up to the compiler's reordering of fp32 sums."""
    import seqlab.train.losses as losses

    monkeypatch.setattr(losses, "BLOCK_ELEMENTS", 4 * 53)
    monkeypatch.setattr(output_loss, "CPU_MIN_ROWS", 1)  # several blocks, one partial: two shapes compiled
    model, src, pad, tgt_in, tgt = model_and_batch("untied_with_bias", seed=4)
    ref_loss, ref_nll, ref_n = fused(model, src, pad, tgt_in, tgt, 0.1)
    ref = grads(model, ref_loss / ref_n)
    loss, nll, n = fused(model, src, pad, tgt_in, tgt, 0.1, compiled=True)
    ours = grads(model, loss / n)
    assert n == ref_n and loss.item() == pytest.approx(ref_loss.item(), rel=1e-6)
    assert nll.item() == pytest.approx(ref_nll.item(), rel=1e-6)
    for name, g in ref.items():
        torch.testing.assert_close(ours[name], g, rtol=1e-5, atol=1e-7, msg=name)


def test_compiling_the_loss_needs_the_fused_loss():
    from seqlab.config import ConfigError
    from seqlab.train.config import TrainConfig

    with pytest.raises(ConfigError, match="train.compile=loss compiles the fused loss's arithmetic; set "
                                          "train.fused_loss=true"):
        TrainConfig(compile="loss")
    both = TrainConfig(compile="all", fused_loss=True)
    assert both.compiles_layers and both.compiles_loss and not TrainConfig(compile="layers").compiles_loss


@pytest.mark.parametrize("frozen", ["output", "all_but_output"])
def test_a_frozen_input_gets_no_gradient_and_the_others_the_unfused_ones(monkeypatch, frozen):
    """Fine-tuning with adapters freezes the output layer: the fused loss then makes no (V, d) gradient for it
    (no fp32 weight-sized buffer, no product a block into it), and the hidden states' gradients are the
    unfused path's. Freezing everything before the output layer leaves its own gradients whole."""
    import seqlab.train.losses as losses

    monkeypatch.setattr(losses, "BLOCK_ELEMENTS", 4 * 53)
    monkeypatch.setattr(output_loss, "CPU_MIN_ROWS", 1)
    model, src, pad, tgt_in, tgt = model_and_batch("untied_with_bias")
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith("output.") != (frozen == "output"))
    ref_loss, _, n = unfused(model, src, pad, tgt_in, tgt, 0.1)
    ref = grads(model, ref_loss / n)
    made = []
    real_zeros = torch.zeros
    monkeypatch.setattr(output_loss.torch, "zeros", lambda *a, **k: made.append(a[0]) or real_zeros(*a, **k))
    loss, _, n = fused(model, src, pad, tgt_in, tgt, 0.1)
    ours = grads(model, loss / n)
    assert ours.keys() == ref.keys() and ours
    assert all(not name.startswith("output.") for name in ours) == (frozen == "output")
    assert (model.output.weight.shape in made) == (frozen != "output")
    for name, g in ref.items():
        torch.testing.assert_close(ours[name], g, rtol=1e-5, atol=1e-7, msg=name)
