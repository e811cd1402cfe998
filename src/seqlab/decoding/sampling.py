"""Keyed randomness for batch-invariant sampling.

Each uniform number is a hash of (seed, row key, step, token id), so the noise a
row sees depends only on its own key, never on batch size, neighbours, device or
how many random numbers were drawn before. Gumbel-max over processed scores is
an exact sample from softmax(scores) (Gumbel 1954; Maddison et al. 2014).
"""

from __future__ import annotations

import torch
from torch import Tensor

MASK32 = 0xFFFFFFFF


def mix32(x: Tensor) -> Tensor:
    """A 32-bit integer finalizer (xor-shift-multiply) on int64 tensors holding values < 2^32.

    Multipliers are below 2^31 so products stay below 2^63: exact in int64 on any device.
    """
    x = x & MASK32
    x = ((x ^ (x >> 16)) * 0x7FEB352D) & MASK32
    x = ((x ^ (x >> 15)) * 0x2C1B3C6D) & MASK32
    x = ((x ^ (x >> 13)) * 0x297A2D39) & MASK32
    return x ^ (x >> 16)


def source_keys(src_ids: Tensor, src_pad_mask: Tensor) -> Tensor:
    """(B, S) -> (B,) a hash of each source's real tokens (so keys do not depend on padding)."""
    h = torch.full((src_ids.shape[0],), 0x9E3779B9, dtype=torch.long, device=src_ids.device)
    for j in range(src_ids.shape[1]):
        mixed = mix32(h ^ mix32(src_ids[:, j].long() + 0x632BE5AB))
        h = torch.where(src_pad_mask[:, j], h, mixed)
    return h


def gumbel_noise(seed: int, keys: Tensor, step: int | Tensor, vocab: int) -> Tensor:
    """(N,) row keys -> (N, V) float64 Gumbel(0, 1) noise for this step (or each row's own step, (N,))."""
    base = mix32(mix32(keys ^ mix32(torch.tensor(seed & MASK32, device=keys.device))) + step * 0x3C6EF372)
    ids = torch.arange(vocab, device=keys.device, dtype=torch.long)
    bits = mix32(base[:, None] ^ mix32(ids[None, :] + 0x1B873593))  # (N, V), uniform 32-bit
    u = (bits.double() + 0.5) / 2.0**32  # in (0, 1)
    return -torch.log(-torch.log(u))
