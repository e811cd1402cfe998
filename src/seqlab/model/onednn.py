"""fp32 linear layers through oneDNN with their weights packed once, for decoding on a CPU.

PyTorch sends fp32 CPU matrix products to MKL. On the AMD EPYC of docs/performance.md, MKL runs the decoder's
products (320 x 256 x 768 and alike) at ~215 GFLOP/s, while oneDNN, with the weight reordered once into
its blocked layout, runs the same products at ~480 GFLOP/s. Decoding multiplies the same weights at every
step, so the reorder is paid once per model. The sums are accumulated in another order than MKL's, so
logits can differ in the last bits, and an output can change where two hypotheses nearly tie.
"""

from __future__ import annotations

import copy
from typing import TypeVar

import torch
from torch import Tensor, nn

from seqlab.hardware import best_ms
from seqlab.model import products
from seqlab.model.layers import fuse_relu, replace_layers

M = TypeVar("M", bound=nn.Module)  # a model: encoder-decoder or one stack


def onednn_available() -> bool:
    """Whether this torch build has oneDNN's packed fp32 linear (x86 CPU builds do)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class PackedLinear(nn.Module):
    """An nn.Linear whose weight is held in oneDNN's packed layout (inference only: no gradient), optionally
    followed by a ReLU that oneDNN applies as it writes the output (`activation="relu"`)."""

    def __init__(self, linear: nn.Linear, activation: str = "none") -> None:
        super().__init__()
        self.out_features, self.activation = linear.out_features, activation
        weight = linear.weight.detach().float().contiguous()
        self.register_buffer("packed", torch.ops.mkldnn._reorder_linear_weight(weight))
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float().contiguous())

    def forward(self, x: Tensor) -> Tensor:  # (..., in) -> (..., out)
        rows = x.reshape(-1, x.shape[-1])
        out = torch.ops.mkldnn._linear_pointwise(rows, self.packed, self.bias, self.activation, [], "")
        return out.view(*x.shape[:-1], self.out_features)


def onednn_linears(model: M) -> M:
    """A CPU copy of `model` (eval mode) whose nn.Linear layers run through oneDNN with packed weights, the
    feed-forward ReLU fused into the first one; the original is untouched (a tied output layer gets its own
    packed copy of the embedding)."""
    packed = copy.deepcopy(model).cpu().float().eval()
    fuse_relu(packed, lambda fc1: PackedLinear(fc1, "relu"))
    replace_layers(packed, nn.Linear, PackedLinear)
    return packed


# A decoding step's products at the reference model's size: 64 sources x beam 5 rows through the feed-forward
# layers (d 256 <-> 1,024) and the output layer (8k vocabulary).
PROBE_SHAPES = ((320, 256, 1024), (320, 1024, 256), (320, 256, 8000))


def one_source_shapes(rows: int) -> tuple[tuple[int, int, int], ...]:
    """A step's products for one source a call (`seqlab translate` answering a line at a time): its `rows`
    (1 greedy, the beams) through a t5-small-sized decoder's feed-forward (512 <-> 2,048) and output (32k
    vocabulary) layers. At so few rows a product's time is the reading of its weights (4 MB, 66 MB: from
    memory, not cache), which each engine does its own way (`products.linear`: one row beside a zero row, a
    few weight-left; oneDNN: its blocked layout)."""
    return (rows, 512, 2048), (rows, 2048, 512), (rows, 512, 32000)


def packed_speedup(repeats: int = 10, shapes: tuple[tuple[int, int, int], ...] = PROBE_SHAPES) -> float:
    """MKL's time over oneDNN's (packed weights) for the products (rows, in, out) `shapes`, on this machine
    with torch's current threads: > 1 means oneDNN is faster (`engine=auto` reads it). MKL's side is the
    default engine's own product (`products.linear`: a few rows weight-left)."""
    g = torch.Generator().manual_seed(0)
    mkl = onednn = 0.0
    with torch.no_grad():
        for m, k, n in shapes:
            linear, x = nn.Linear(k, n), torch.randn(m, k, generator=g)
            packed = PackedLinear(linear)
            mkl += best_ms(lambda linear=linear, x=x: products.linear(x, linear.weight, linear.bias), repeats)
            onednn += best_ms(lambda packed=packed, x=x: packed(x), repeats)
    return mkl / onednn
