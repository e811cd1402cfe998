"""The model's linear layers: x W^T + b, with a decoding call's rows taken the fast way round on a CPU.

MKL's fp32 product of a few dozen rows (2-128: a decoding step's beams or sources, a speculative call's
positions) by a transposed weight runs far below the memory's speed on the 2-core AVX2 EPYC measured: t5-small's
output layer (32,128 x 512) took ~30 ms for 5 rows where (W x^T)^T, the same product with the weight as the
left operand, took ~9 ms, and a decoding step's projections gained alike (one row is faster as it is). Beam
search of one source a call decoded 2.0-2.2x faster for it at the families bench's t5-small, bart-base and
opus-mt shapes, the outputs the same (`benchmarks/few_rows.py`). The weight on the left stays ahead up to
~128 rows at every families and language-model layer shape (1.1-1.5x at 64 rows, 1.0-1.4x at 128; about even
from 192: `benchmarks/few_rows_products.py`). Training (gradients on), autocast and other devices and types
keep `F.linear`; so do engines that bring their own products (oneDNN's packed weights, int8).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

FEW_ROWS = range(2, 129)  # rows a product takes as (W x^T)^T: from 2 (one row is a matrix-vector product)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """(..., in) -> (..., out): x W^T + b, as (W x^T)^T for `FEW_ROWS` rows of fp32 on a CPU without
    gradients or autocast (the rounding of a different summation order, well inside fp32's; outputs
    contiguous)."""
    if (torch.is_grad_enabled() or x.device.type != "cpu" or x.dtype != torch.float32
            or weight.dtype != torch.float32 or torch.is_autocast_enabled("cpu")):
        return F.linear(x, weight, bias)  # training's products first: no guard on their shapes when compiled
    rows = x.numel() // max(x.shape[-1], 1)
    if rows not in FEW_ROWS:
        return F.linear(x, weight, bias)
    flat = x.reshape(rows, x.shape[-1]).t()  # (in, rows)
    out = torch.mm(weight, flat) if bias is None else torch.addmm(bias[:, None], weight, flat)  # (out, rows)
    return out.t().contiguous().view(*x.shape[:-1], weight.shape[0])


class Linear(nn.Linear):
    """nn.Linear through `linear`: the same parameters, names and initialization."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


def plain_linears(model: nn.Module) -> None:
    """In place: every `Linear` becomes an nn.Linear on the same parameters, for tools that match the exact
    class (PyTorch's dynamic quantization)."""
    for module in model.modules():
        if type(module) is Linear:
            module.__class__ = nn.Linear  # the same module, its parameters and hooks, nn.Linear's forward
