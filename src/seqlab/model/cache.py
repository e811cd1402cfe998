"""The decoder's incremental-decoding cache: preallocated self-attention buffers, shared cross-attention.

Self-attention keys/values of each layer live in (N, H, capacity, Dh) buffers:
a step writes its new keys/values in place (no concatenation), and beam search
rearranges rows in place, copying only the rows whose beam changed.
Cross-attention keys/values are computed once per source and kept once per
source: with `group` rows (beams) per source they are (N / group, H, S, Dh), and
each source's beams attend to them together as one group of queries. A model
with copy attention keeps its copy keys and source ids the same way.

Searches move rows in place (`compact_`, `rearrange_`): the moved rows are gathered into a
temporary of their own size and written back into the buffers, which keep their capacity. On
CPU a freshly allocated tensor pays a page fault per page on first write wherever the allocator
has handed the memory back to the OS; rebuilding the capacity-sized buffers each time an example
finished took a fifth of beam search while the process's heap was trimmed at every free
(BENCHMARKS.md), and in place no allocation of their size happens during the search at all.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from seqlab.model.copy import CopySource

KV = tuple[Tensor, Tensor]


class KVBuffer:
    """One layer's self-attention keys and values so far: the first `rows` rows of (N, H, capacity, Dh)."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.length, self.rows = capacity, 0, 0
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def live(self) -> KV:
        """The keys and values of the live rows so far, (rows, H, length, Dh) views."""
        return self.k[: self.rows, :, : self.length], self.v[: self.rows, :, : self.length]

    def append(self, k: Tensor, v: Tensor) -> KV:
        """Store (N, H, T, Dh) new keys/values; return all of them so far as views."""
        n, h, t, dh = k.shape
        if self.k is None or self.length + t > self.k.shape[2]:
            grown = max(self.capacity, 2 * (self.k.shape[2] if self.k is not None else 0), self.length + t)
            new_k, new_v = k.new_empty(n, h, grown, dh), v.new_empty(n, h, grown, dh)
            if self.k is not None:
                new_k[: self.rows, :, : self.length], new_v[: self.rows, :, : self.length] = self.live()
            self.k, self.v, self.rows = new_k, new_v, n
        if n != self.rows:
            raise ValueError(f"the cache holds {self.rows} rows but the decoder step has {n}")
        self.k[:n, :, self.length : self.length + t] = k
        self.v[:n, :, self.length : self.length + t] = v
        self.length += t
        return self.live()  # (N, H, T_all, Dh)

    def select(self, index: Tensor) -> KVBuffer:
        """A new buffer holding rows `index` (any subset or order); this one is unchanged."""
        out = KVBuffer(self.capacity)
        if self.k is not None:
            k, v = self.live()
            out.append(k.index_select(0, index), v.index_select(0, index))
        return out

    def take_(self, index: Tensor) -> None:
        """In place: row i becomes old row index[i] (any subset or order, at most as many rows)."""
        if self.k is None:
            return
        m = index.shape[0]
        k, v = (x.index_select(0, index) for x in self.live())  # read everything before writing
        self.k[:m, :, : self.length], self.v[:m, :, : self.length] = k, v
        self.rows = m

    def rearrange_(self, index: Tensor, changed: Tensor) -> None:
        """In place: row i becomes old row index[i]; only rows in `changed` are copied."""
        if self.k is None or changed.numel() == 0:
            return
        source = index[changed]
        for x in self.live():
            x.index_copy_(0, changed, x.index_select(0, source))  # the right side is read first


class DecoderCache:
    """Everything incremental decoding keeps between steps; rows along dim 0."""

    def __init__(self, cross_kv: tuple[KV, ...], cross_mask: Tensor, group: int = 1, capacity: int = 64,
                 copy: CopySource | None = None) -> None:
        self.layers = [KVBuffer(capacity) for _ in cross_kv]
        self.cross_kv, self.cross_mask, self.group = cross_kv, cross_mask, group  # cross: (G, H, S, Dh)
        self.copy = copy  # per source, like cross_kv

    @property
    def length(self) -> int:
        return self.layers[0].length if self.layers else 0

    def _sources(self, index: Tensor) -> Tensor:
        """The source of each group of `group` rows in `index`; every group must come from one source."""
        sources = index.view(-1, self.group)[:, 0] // self.group
        if self.group > 1 and not bool((index // self.group == sources.repeat_interleave(self.group)).all()):
            raise ValueError("reorder: each group of rows must come from a single source")
        return sources

    def reorder(self, index: Tensor) -> DecoderCache:
        """A new cache whose rows are rows `index` of this one (subset and/or reorder); this one is unchanged.

        With group > 1 every group of `group` rows must come from one source (as beams
        do); the per-source tensors (cross-attention keys/values, copy state) follow. A search
        that no longer needs the old cache uses `compact_` (in place) instead.
        """
        sources = self._sources(index)
        return self._with_sources([layer.select(index) for layer in self.layers], self.group,
                                  lambda t: t.index_select(0, sources))

    def compact_(self, index: Tensor) -> None:
        """In place, what `reorder(index)` returns: rows (finished ones dropped, beams moved) and their sources."""
        sources = self._sources(index)
        for layer in self.layers:
            layer.take_(index)
        moved = self._with_sources(self.layers, self.group, lambda t: t.index_select(0, sources))
        self.cross_kv, self.cross_mask, self.copy = moved.cross_kv, moved.cross_mask, moved.copy

    def rearrange_(self, index: Tensor) -> None:
        """In place, for beam search: row i takes row index[i] (same source), copying only changed rows."""
        changed = (index != torch.arange(index.shape[0], device=index.device)).nonzero().squeeze(1)
        for layer in self.layers:
            layer.rearrange_(index, changed)

    def ungroup(self) -> DecoderCache:
        """The same cache with its per-source tensors repeated per row (group 1)."""
        if self.group == 1:
            return self
        return self._with_sources(self.layers, 1, lambda t: t.repeat_interleave(self.group, 0))

    def _with_sources(self, layers: list[KVBuffer], group: int, pick: Callable[[Tensor], Tensor]) -> DecoderCache:
        """A cache with these self-attention buffers and every per-source tensor passed through `pick`."""
        out = DecoderCache.__new__(DecoderCache)
        out.layers, out.group = layers, group
        out.cross_kv = tuple((pick(k), pick(v)) for k, v in self.cross_kv)
        out.cross_mask = pick(self.cross_mask)
        out.copy = CopySource(pick(self.copy.keys), pick(self.copy.ids)) if self.copy is not None else None
        return out
