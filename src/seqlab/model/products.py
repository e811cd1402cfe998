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

Not every shape: some one-row products read worse weight-left, most of all a weight four times taller than
wide. On the AVX-512 EPYC, oneDNN's matrix product on the plain weight took GPT-2's feed-forward output layer
(3072 -> 768) 1.43x as fast, t5-small's (2048 -> 512) 1.64x and t5-small's cross-attention keys and values
(512 -> 1024) 1.51x, while SmolLM-135M's feed-forward output layer (1536 -> 576) ran at 0.70x. Inside a
compiled program a third way is open: the row times the weight, summed along each of its rows
(`REDUCTION`), which Inductor compiles into one loop over the weight (never the products whole), with the
bias and the step's neighbouring work fused in. It read GPT-2's layers faster still (its attention output
768 -> 768 1.6-2.0x weight-left, 3072 -> 768 1.7x), its output layer not (0.9-1.1x), and t5-small's step
not at all. So a layer can take one row another way (`Linear.one_row`), which model.one_row decides per shape
by timing every way, compiled, on the model's own weights (`python benchmarks/one_prompt_gap.py --shape S
--engines none` prints them): what engine=seqlab_compiled does for its one-row steps. Eagerly REDUCTION is
weight-left: the sum would first build the (out, in) products.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

FEW_ROWS = range(1, 129)  # rows a product takes as (W x^T)^T, one row padded to two
WEIGHT_LEFT, ONEDNN, REDUCTION = "weight_left", "onednn", "reduction"  # how a layer takes one row (`Linear.one_row`)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None, one_row: str = WEIGHT_LEFT) -> Tensor:
    """(..., in) -> (..., out): x W^T + b, as (W x^T)^T for `FEW_ROWS` rows of fp32 on a CPU without
    gradients or autocast (the rounding of a different summation order, well inside fp32's; outputs
    contiguous); one row through oneDNN's product on the plain weight where `one_row` is ONEDNN, as a
    sum of products for Inductor's loop where it is REDUCTION and this runs compiled."""
    if (torch.is_grad_enabled() or x.device.type != "cpu" or x.dtype != torch.float32
            or weight.dtype != torch.float32 or torch.is_autocast_enabled("cpu")):
        return F.linear(x, weight, bias)  # training's products first: no guard on their shapes when compiled
    rows = x.numel() // max(x.shape[-1], 1)
    if rows not in FEW_ROWS:
        return F.linear(x, weight, bias)
    flat = x.reshape(rows, x.shape[-1])
    if rows == 1 and one_row == REDUCTION and torch.compiler.is_compiling():
        out = (weight * flat).sum(-1)  # (out,): one loop of Inductor's, never the (out, in) product itself
        out = out if bias is None else out + bias
        return out.view(*x.shape[:-1], weight.shape[0])
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
    one-row product (WEIGHT_LEFT; ONEDNN or REDUCTION where model.one_row.tune_one_row measured it faster)."""

    one_row = WEIGHT_LEFT

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias, self.one_row)


def plain_linears(model: nn.Module) -> None:
    """In place: every `Linear` becomes an nn.Linear on the same parameters, for tools that match the exact
    class (PyTorch's dynamic quantization)."""
    for module in model.modules():
        if type(module) is Linear:
            module.__class__ = nn.Linear  # the same module, its parameters and hooks, nn.Linear's forward
