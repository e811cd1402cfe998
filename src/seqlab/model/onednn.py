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
