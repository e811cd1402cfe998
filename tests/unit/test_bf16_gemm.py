"""seqlab.bf16_gemm: bf16 products as fp32 products of the bf16 operands, held against the exact product and
against PyTorch's own bf16 kernels (oneDNN on an AVX512 CPU, the scalar fallback elsewhere)."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import seqlab.bf16_gemm as bg
from seqlab.bench.speed import bench_optimizer, run_train_step, seqlab_train_step
from seqlab.bf16_gemm import GEMMS, Bf16GemmsInFp32, bf16_autocast, bf16_gemms
from seqlab.decoding import precision_context
from seqlab.model import ModelConfig, Seq2SeqTransformer
from seqlab.train.levers import step_loss


def _bf16(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).bfloat16()


# name -> (the product, its bf16 operands, its keyword arguments)
PRODUCTS = {
    "mm": lambda: (torch.mm, (_bf16(24, 96, seed=1), _bf16(96, 40, seed=2)), {}),
    "mm_transposed": lambda: (torch.mm, (_bf16(96, 24, seed=1).t(), _bf16(96, 40, seed=2)), {}),
    "addmm": lambda: (torch.addmm, (_bf16(40, seed=3), _bf16(24, 96, seed=1), _bf16(96, 40, seed=2)),
                      {"beta": 0.5, "alpha": 2.0}),
    "bmm": lambda: (torch.bmm, (_bf16(3, 24, 96, seed=1), _bf16(3, 96, 40, seed=2)), {}),
    "baddbmm": lambda: (torch.baddbmm, (_bf16(3, 24, 40, seed=3), _bf16(3, 24, 96, seed=1),
                                        _bf16(3, 96, 40, seed=2)), {"beta": 1.0, "alpha": 0.25}),
    "matmul_4d": lambda: (torch.matmul, (_bf16(2, 3, 24, 96, seed=1), _bf16(2, 3, 96, 40, seed=2)), {}),
    "linear": lambda: (F.linear, (_bf16(5, 7, 96, seed=1), _bf16(40, 96, seed=2), _bf16(40, seed=3)), {}),
    "mv": lambda: (torch.mv, (_bf16(24, 96, seed=1), _bf16(96, seed=2)), {}),
}


def _spacing(x: torch.Tensor) -> torch.Tensor:
    """The distance between consecutive bf16 numbers at |x| (8 significant bits)."""
    return torch.exp2(torch.floor(torch.log2(x.abs().clamp(min=1e-30))) - 7)


CONTRACTED = 96  # every product below sums 96 terms


@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_a_product_is_the_exact_product_rounded_to_bf16_as_the_native_kernel_gives_it(name):
    """bf16 operands, fp32 sums, one rounding to bf16: every element within half a bf16 place of the exact
    (fp64) product, plus what summing K terms in fp32 can add (K 2^-24 times the sum of the terms' sizes) -
    the bound PyTorch's own bf16 kernel meets on the same operands, so the two differ by at most one place."""
    op, args, kwargs = PRODUCTS[name]()
    exact = op(*[a.double() for a in args], **kwargs)
    native = op(*args, **kwargs)
    with Bf16GemmsInFp32():
        ours = op(*args, **kwargs)
    assert ours.dtype == native.dtype == torch.bfloat16 and ours.shape == native.shape
    sums = (CONTRACTED + 2) * 2.0**-24 * op(*[a.double().abs() for a in args], **kwargs)
    for got in (ours, native):
        half_place = 0.5 * _spacing(torch.maximum(exact.abs(), got.double().abs()))
        assert bool(((got.double() - exact).abs() <= half_place + sums).all())
    place = _spacing(torch.maximum(ours.double().abs(), native.double().abs()))
    assert bool(((ours.double() - native.double()).abs() <= place + 2 * sums).all())


def test_fp32_products_and_other_ops_pass_through_unchanged():
    a, b = torch.randn(16, 32), torch.randn(32, 8)
    with Bf16GemmsInFp32():
        inside = (a @ b, torch.softmax(a.bfloat16(), -1), (a.bfloat16() * 3).sum())
    assert torch.equal(inside[0], a @ b)
    assert torch.equal(inside[1], torch.softmax(a.bfloat16(), -1))
    assert torch.equal(inside[2], (a.bfloat16() * 3).sum())


class _Gemms(TorchDispatchMode):
    """Records the dtypes of every product that reaches the kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: list[torch.dtype] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in GEMMS:
            self.dtypes.append(args[-1].dtype)
        return func(*args, **(kwargs or {}))


def _model_and_batch():
    cfg = ModelConfig(src_vocab_size=97, d_model=32, n_heads=4, d_ff=64, encoder_layers=2, decoder_layers=2,
                      dropout=0.0)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, 97, (4, 9), generator=g)
    pad = torch.zeros_like(src, dtype=torch.bool)
    pad[1, 6:] = True
    tgt_in, tgt = torch.randint(4, 97, (4, 7), generator=g), torch.randint(4, 97, (4, 7), generator=g)
    return Seq2SeqTransformer(cfg), (src, pad, tgt_in, tgt)


def _step(model, batch, precision: str, mode=None):
    """Loss, gradients, and the dtypes the products reached the kernels in: one bf16-mixed (or fp32) step."""
    model.zero_grad(set_to_none=True)
    seen = _Gemms()
    with seen, torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"), mode or nullcontext():
        loss, _, n = step_loss(model, *batch, 0.1)
        (loss / n).backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    return float(loss.detach() / n), grads, seen.dtypes


def test_a_training_step_multiplies_in_fp32_and_keeps_the_bf16_steps_dtypes_and_accuracy():
    """Under the mode a bf16-mixed step's products (forward and backward) all reach the fp32 kernel, every
    gradient keeps its dtype, and the step is as close to the fp32 step as the native bf16 step is: the two
    round the same products, in another order of fp32 sums."""
    model, batch = _model_and_batch()
    exact_loss, exact, _ = _step(model, batch, "fp32")
    native_loss, native, native_dtypes = _step(model, batch, "bf16")
    ours_loss, ours, our_dtypes = _step(model, batch, "bf16", Bf16GemmsInFp32())
    assert set(native_dtypes) == {torch.bfloat16}
    assert our_dtypes and set(our_dtypes) == {torch.float32} and len(our_dtypes) == len(native_dtypes)
    assert {k: g.dtype for k, g in ours.items()} == {k: g.dtype for k, g in native.items()}

    def error(grads):
        flat = torch.cat([grads[k].flatten() for k in exact])
        ref = torch.cat([exact[k].flatten() for k in exact])
        return float((flat - ref).norm() / ref.norm())

    assert abs(ours_loss - native_loss) < 2e-3 and abs(ours_loss - exact_loss) < 2e-2
    assert error(ours) <= 2 * error(native) + 1e-3 and error(ours) < 0.1


def test_the_mode_is_used_only_for_bf16_on_a_cpu_without_bf16_kernels(monkeypatch):
    monkeypatch.setattr(bg, "native_bf16_gemms", lambda: True)
    assert not isinstance(bf16_gemms("cpu", True), Bf16GemmsInFp32)
    monkeypatch.setattr(bg, "native_bf16_gemms", lambda: False)
    assert isinstance(bf16_gemms("cpu", True), Bf16GemmsInFp32)
    assert not isinstance(bf16_gemms("cpu", False), Bf16GemmsInFp32)
    assert not isinstance(bf16_gemms("cuda", True), Bf16GemmsInFp32)


@pytest.mark.parametrize("context", ["bf16_autocast", "decoding"])
def test_bf16_forwards_outside_lightning_take_the_mode(monkeypatch, context):
    """The benches' steps (`bf16_autocast`) and bf16 decoding (`precision_context`) run their products in fp32
    on such a CPU, under bf16 autocast."""
    monkeypatch.setattr(bg, "native_bf16_gemms", lambda: False)
    seen = _Gemms()
    a, w = torch.randn(4, 16), torch.randn(8, 16)
    with seen, (bf16_autocast("cpu") if context == "bf16_autocast" else precision_context("bf16", "cpu")):
        out = F.linear(a, w)
    assert out.dtype == torch.bfloat16 and seen.dtypes == [torch.float32]
    with seen, precision_context("fp32", "cpu"):
        assert F.linear(a, w).dtype == torch.float32


def test_a_benchs_training_step_runs_its_backward_products_in_fp32_too(monkeypatch):
    """`run_train_step` (every bench's timed step): the backward's products take the fp32 kernel as the
    forward's do; on such a CPU a backward left to the bf16 fallback would time a kernel training never runs."""
    monkeypatch.setattr(bg, "native_bf16_gemms", lambda: False)
    model, (src, pad, tgt_in, tgt) = _model_and_batch()
    batch = {"src": src, "pad": pad, "tgt_in": tgt_in, "tgt": tgt}
    opt = bench_optimizer(model)
    seen = _Gemms()
    with seen:
        run_train_step(seqlab_train_step(model, 0.1), opt, batch, "bf16-mixed")
    training = _step(model, (src, pad, tgt_in, tgt), "bf16", Bf16GemmsInFp32())[2]  # forward and backward
    assert set(seen.dtypes) == {torch.float32} and len(seen.dtypes) == len(training)
