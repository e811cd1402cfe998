"""The model's linear layers: x W^T + b, with a decoding call's rows taken the fast way round on a CPU.

MKL's fp32 product of a few dozen rows (2-128: a decoding step's beams or sources, a speculative call's
positions) by a transposed weight runs far below the memory's speed on the 2-core AVX2 EPYC measured: t5-small's
output layer (32,128 x 512) took ~30 ms for 5 rows where (W x^T)^T, the same product with the weight as the
left operand, took ~9 ms, and a decoding step's projections gained alike. Beam search of one source a call
decoded 2.0-2.2x faster for it at the families bench's t5-small, bart-base and opus-mt shapes, the outputs the
same (`benchmarks/few_rows.py`). The weight on the left stays ahead up to ~128 rows at every families and
language-model layer shape (1.1-1.5x at 64 rows, 1.0-1.4x at 128; about even from 192:
`benchmarks/few_rows_products.py`). One row (greedy search of one source) is a matrix-vector product, which MKL
runs on one thread, reading the weights at ~10 GB/s; with a zero row beside it, it is a matrix product on both
threads: a t5-small greedy step's products took 5.2 ms instead of 15.3 (30 GB/s) on the 2-core AVX-512 EPYC,
bart-base's 12.4 instead of 28.7, opus-mt's 6.5 instead of 21.0, ahead of oneDNN's packed weights (7.5, 15.2,
9.6; `benchmarks/one_row_step.py`). Training (gradients on), autocast and other devices and types keep
`F.linear`; so do engines that bring their own products (oneDNN's packed weights, int8).

Not every shape: a one-row product whose weight is taller than wide reads worse weight-left. On the AVX-512
EPYC, GPT-2's feed-forward output layer (3072 -> 768) took 466 us that way and 322 us through oneDNN's matrix
product on the plain weight, t5-small's (2048 -> 512) 185 and 101 us; SmolLM-135M's (1536 -> 576) the other way
round, 120 and 158 us (`benchmarks/one_prompt_gap.py`). So a layer can take one row through oneDNN instead
(`Linear.one_row`), which `tune_one_row` decides per shape by timing both ways on the model's own weights:
what engine=seqlab_compiled does for its one-row steps.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.hardware import best_of, timed

FEW_ROWS = range(1, 129)  # rows a product takes as (W x^T)^T, one row padded to two
WEIGHT_LEFT, ONEDNN = "weight_left", "onednn"  # the ways a layer can take one row (`Linear.one_row`)
ONE_ROW_MARGIN = 1.1  # oneDNN taken at this speedup or more: below it, the two are level within a run's spread


def linear(x: Tensor, weight: Tensor, bias: Tensor | None, one_row: str = WEIGHT_LEFT) -> Tensor:
    """(..., in) -> (..., out): x W^T + b, as (W x^T)^T for `FEW_ROWS` rows of fp32 on a CPU without
    gradients or autocast (the rounding of a different summation order, well inside fp32's; outputs
    contiguous); one row through oneDNN's product on the plain weight where `one_row` is ONEDNN."""
    if (torch.is_grad_enabled() or x.device.type != "cpu" or x.dtype != torch.float32
            or weight.dtype != torch.float32 or torch.is_autocast_enabled("cpu")):
        return F.linear(x, weight, bias)  # training's products first: no guard on their shapes when compiled
    rows = x.numel() // max(x.shape[-1], 1)
    if rows not in FEW_ROWS:
        return F.linear(x, weight, bias)
    flat = x.reshape(rows, x.shape[-1])
    if rows == 1 and one_row == ONEDNN:
        out = torch.ops.mkldnn._linear_pointwise(flat, weight, bias, "none", [], "")  # (1, out)
        return out.view(*x.shape[:-1], weight.shape[0])
    if rows == 1:  # a zero row beside it: a matrix product on every thread, not a one-thread matrix-vector one
        flat = torch.cat([flat, flat.new_zeros(flat.shape)])
    flat = flat.t()  # (in, rows or 2)
    out = torch.mm(weight, flat) if bias is None else torch.addmm(bias[:, None], weight, flat)  # (out, rows or 2)
    return out[:, :rows].t().contiguous().view(*x.shape[:-1], weight.shape[0])


class Linear(nn.Linear):
    """nn.Linear through `linear`: the same parameters, names and initialization. `one_row`: how it takes a
    one-row product (WEIGHT_LEFT, or ONEDNN where `tune_one_row` measured that faster)."""

    one_row = WEIGHT_LEFT

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias, self.one_row)


def one_row_layers(model: nn.Module) -> dict[tuple[int, int], list[Linear]]:
    """The model's layers that take a decoding step's rows through their own forward, by (in, out) shape (a
    gated feed-forward's first layer takes its two halves apart: layers.FeedForward.gate_and_up)."""
    from seqlab.model.layers import FeedForward

    halves = {id(m.fc1) for m in model.modules() if isinstance(m, FeedForward) and m.gated}
    shapes: dict[tuple[int, int], list[Linear]] = {}
    for m in model.modules():
        if isinstance(m, Linear) and id(m) not in halves:
            shapes.setdefault((m.in_features, m.out_features), []).append(m)
    return shapes


def one_row_through(layers: list[Linear], x: Tensor, way: str) -> tuple[list[Tensor], float]:
    """x through each layer in turn, the same row each time, `way`: (outputs, seconds)."""
    return timed(lambda: [linear(x, m.weight, m.bias, way) for m in layers])


def tune_one_row(model: nn.Module, repeats: int = 5, margin: float = ONE_ROW_MARGIN) -> dict[tuple[int, int], float]:
    """In place: each layer shape whose one-row product runs `margin` times or more faster through oneDNN than
    weight-left takes ONEDNN, the others WEIGHT_LEFT. Each way is timed on one row through all the model's
    layers of the shape in turn (so the weights come from memory, as in a step), the two ways alternating,
    the best of `repeats` after a warm-up (hardware.best_of). Returns each shape's speedup through oneDNN; an
    empty dict where this torch has no oneDNN."""
    from seqlab.model.onednn import onednn_available  # onednn -> layers -> this module

    if not onednn_available():
        return {}
    speedups = {}
    with torch.no_grad():
        for (d_in, _), layers in one_row_layers(model).items():
            x = torch.randn(1, d_in)
            ways = {way: partial(one_row_through, layers, x, way) for way in (WEIGHT_LEFT, ONEDNN)}
            for run in ways.values():
                run()
            best = best_of(ways, repeats)
            speedup = best[WEIGHT_LEFT][1] / best[ONEDNN][1]
            for m in layers:
                m.one_row = ONEDNN if speedup >= margin else WEIGHT_LEFT
            speedups[(d_in, layers[0].out_features)] = speedup
    return speedups


def plain_linears(model: nn.Module) -> None:
    """In place: every `Linear` becomes an nn.Linear on the same parameters, for tools that match the exact
    class (PyTorch's dynamic quantization)."""
    for module in model.modules():
        if type(module) is Linear:
            module.__class__ = nn.Linear  # the same module, its parameters and hooks, nn.Linear's forward
