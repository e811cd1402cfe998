"""The real tokens of a padded batch as one run of rows, for the layers that read each token alone.

A batch of prompts of mixed lengths is right-padded to the longest: at 20 to 40 tokens a prompt, a third of the
(B, T) slots are padding, and every projection, feed-forward layer and norm computed them. Those layers are
position-wise, so they give each real token the same result on the packed rows (R, d), R = the real tokens;
only attention needs the (B, T) layout, and unpacks its queries, keys and values to it (a copy of a few
rows' width, against products over every padded slot)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True)
class Packing:
    """Where the real tokens of a (B, T) batch sit, row-major: `index` (R,) into the flattened B * T slots."""

    index: Tensor  # (R,) long
    batch: int
    length: int

    @classmethod
    def of(cls, valid: Tensor) -> Packing | None:
        """The packing of `valid` (B, T) bool (True at real tokens), or None where packing saves nothing (no
        padding, or one token a row: a decoding step)."""
        if valid.shape[1] < 2 or bool(valid.all()):
            return None
        return cls(valid.reshape(-1).nonzero().squeeze(1), valid.shape[0], valid.shape[1])

    def pack(self, x: Tensor) -> Tensor:
        """(B, T, ...) -> (R, ...): the real tokens' rows."""
        return x.reshape(self.batch * self.length, *x.shape[2:]).index_select(0, self.index)

    def unpack(self, x: Tensor) -> Tensor:
        """(R, ...) -> (B, T, ...), zeros at padding (which attention masks out and nobody reads)."""
        full = x.new_zeros(self.batch * self.length, *x.shape[1:])
        return full.index_copy_(0, self.index, x).view(self.batch, self.length, *x.shape[1:])  # in place: no clone


def at_real(valid: Tensor, h: Tensor, project: Callable[[Tensor], Tensor]) -> Tensor:
    """project(h) (B, T, V) computed at the real tokens of `valid` (B, T) only, zeros elsewhere: a speculative
    call's fillers and unused proposal slots (`DecoderCache.valid`) would otherwise take the output layer's
    product, the widest of the step, for scores nobody reads."""
    packing = Packing.of(valid)
    return project(h) if packing is None else packing.unpack(project(packing.pack(h)))
