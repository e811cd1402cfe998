"""Dropout whose keep/drop decisions come from 16 random bits each, four decisions per 64-bit draw.

Why: PyTorch's CPU dropout draws one Bernoulli sample per element, which at seqlab's sizes costs
more than the matrix product before it (a (64, 40, 1024) tensor: ~20 ms against ~5 ms here on a
2-core CPU; dropout was a tenth of a bf16 training step, docs/performance.md). Here one int64 draw of
torch's default generator gives four 16-bit numbers u, uniform on [0, 65536); an element is
dropped when u < k, k = round(p * 65536). The drop probability is therefore k / 65536 (within
1/131072 of p), and kept elements are scaled by 65536 / (65536 - k), the exact inverse of their
keep probability, so E[dropout(x)] = x exactly, as with PyTorch's. The generator is torch's, so
`torch.manual_seed` (and a resumed run's reseeding) makes the masks reproducible.

`kernel`: "bits" (this), "torch" (F.dropout), "auto" = bits on CPU, PyTorch's fused kernel elsewhere.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.model.config import DropoutKernel

LEVELS = 1 << 16


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, device: torch.device) -> tuple[Tensor, float]:
    """(bool mask of `shape`, True = keep, each kept with probability 1 - k/65536; that probability)."""
    drop = min(LEVELS, round(p * LEVELS))
    n = math.prod(shape)
    words = torch.randint(-(1 << 63), (1 << 63) - 1, ((n + 3) // 4,), dtype=torch.int64, device=device)
    u = words.view(torch.int16)[:n].view(shape)  # u + 32768 is uniform on [0, 65536)
    return u >= drop - (1 << 15), (LEVELS - drop) / LEVELS


def masked_scale(x: Tensor, mask: Tensor, scale: float) -> Tensor:
    """x * mask * scale, the mask made 0/1 in x's dtype first.

    Why: PyTorch multiplies a bool tensor into a bf16 or fp32 one element by element, without
    vectorizing (a (64, 40, 256) bf16 product: 0.32 ms), and converts bool to bf16 no faster, while
    viewing the mask as uint8 converts it at memory speed (0.07 ms) and the same-dtype product
    vectorizes (0.05 ms). The values are those of `(x * mask).mul_(scale)`: multiplying by exactly 0 or
    1 rounds nothing, and `scale` stays a Python float, applied at the op's own precision.
    """
    return (x * mask.view(torch.uint8).to(x.dtype)).mul_(scale)


class _MaskedScale(torch.autograd.Function):
    """x * mask * scale with the bool mask saved (one byte per element, as PyTorch's dropout keeps)."""

    @staticmethod
    def forward(ctx, x: Tensor, mask: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(mask)
        ctx.scale = scale
        return masked_scale(x, mask, scale)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        (mask,) = ctx.saved_tensors
        return masked_scale(grad, mask, ctx.scale), None, None


def dropout(x: Tensor, p: float, training: bool, kernel: DropoutKernel = "auto") -> Tensor:
    """Inverted dropout of x with drop probability p (identity when not training or p == 0)."""
    if not training or p == 0.0:
        return x
    if kernel == "torch" or (kernel == "auto" and x.device.type != "cpu"):
        return F.dropout(x, p, True)
    mask, keep = keep_mask(x.shape, p, x.device)
    if keep == 0.0:
        return x * 0.0
    return _MaskedScale.apply(x, mask, 1.0 / keep)


class Dropout(nn.Module):
    """nn.Dropout through `dropout` (the kernel chosen by ModelConfig.dropout_kernel)."""

    def __init__(self, p: float, kernel: DropoutKernel = "auto") -> None:
        super().__init__()
        self.p, self.kernel = p, kernel

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training, self.kernel)

    def extra_repr(self) -> str:
        return f"p={self.p}, kernel={self.kernel}"


def dropped_layers(layers: int, p: float, training: bool) -> list[bool]:
    """Which of a stack's `layers` this forward skips (LayerDrop, Fan et al. 2020): in training each with
    probability p, none in evaluation. One uniform number a layer from torch's default generator, in the
    layers' order and only when p > 0, which are the numbers Hugging Face's BART-style stacks draw one at a
    time (fairseq's LayerDropModuleList draws them alike): under the same seed the same layers are skipped."""
    if not training or p == 0.0:
        return [False] * layers
    return (torch.rand(layers) < p).tolist()
