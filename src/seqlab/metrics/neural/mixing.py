"""COMET's layer mixing and pooling: a scalar mix of every encoder layer (Peters et al. 2018, as COMET's
LayerwiseAttention computes it) and the sentence embedding pooled from the mixed token embeddings."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def sparsemax(z: Tensor) -> Tensor:  # (n,) -> (n,)
    """Sparsemax (Martins & Astudillo 2016): the Euclidean projection of z onto the simplex, which sets the
    smallest weights to exactly 0 (entmax's `sparsemax`, which COMET uses)."""
    ordered, _ = torch.sort(z, descending=True)
    k = torch.arange(1, z.numel() + 1, dtype=z.dtype, device=z.device)
    cumulative = ordered.cumsum(0)
    support = int((1 + k * ordered > cumulative).sum())
    tau = (cumulative[support - 1] - 1) / support
    return torch.clamp(z - tau, min=0)


def layer_norm(tensor: Tensor, mask: Tensor) -> Tensor:  # (batch, width, hidden), (batch, width)
    """Each sentence normalised by the mean and variance of its unpadded token values (COMET's _layer_norm)."""
    broadcast = mask.unsqueeze(-1)
    batch, _, hidden = tensor.shape
    count = mask.sum(1) * hidden
    masked = tensor * broadcast
    mean = (masked.view(batch, -1).sum(1) / count).view(batch, 1, 1)
    variance = (((masked - mean) * broadcast) ** 2).view(batch, -1).sum(1) / count
    return (tensor - mean) / torch.sqrt(variance + 1e-12).view(batch, 1, 1)


def mix_layers(layers: Sequence[Tensor], mask: Tensor, weights: Tensor, gamma: Tensor, how: str,
               normalise: bool) -> Tensor:  # layers: (batch, width, hidden) each -> (batch, width, hidden)
    """gamma * sum_i w_i * layer_i, w = softmax or sparsemax of the scalar weights; each layer normalised per
    sentence first when `normalise`."""
    w = torch.softmax(weights, dim=0) if how == "softmax" else sparsemax(weights)
    mask = mask.float()
    pieces = [w[i] * (layer_norm(t, mask) if normalise else t) for i, t in enumerate(layers)]
    return gamma * sum(pieces)


def pool(how: str, ids: Tensor, embeddings: Tensor, mask: Tensor, pad: int, last: Tensor) -> Tensor:
    """The sentence embedding (batch, hidden): `avg` = mean of the unpadded tokens, `max` = their maximum,
    `cls` = the first token of the mix, `default` = the first token of the encoder's last layer."""
    padded = ids.eq(pad).unsqueeze(-1)
    if how == "avg":
        return embeddings.float().masked_fill(padded, 0.0).sum(1) / mask.float().sum(1, keepdim=True)
    if how == "max":
        return embeddings.float().masked_fill(padded, float("-inf")).max(dim=1)[0]
    if how == "cls":
        return embeddings[:, 0, :]
    return last[:, 0, :]
