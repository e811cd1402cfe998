"""The decoder's incremental-decoding cache: preallocated self-attention buffers, shared cross-attention.

Self-attention keys/values of each layer live time-major, in (capacity, N, H, Dh) buffers: a step
writes its new keys/values in place (no concatenation), and the keys/values so far, `[:length]`, are
one contiguous block whatever the number of rows. Beam search moves rows at every step (each beam
takes its parent's history); a move gathers that block along the row axis straight into a spare
buffer of the same size, which then takes the old one's place (`take_`). Kept head-major, the live
part of each row is a strided slice, and moving rows in place (gather into a temporary, write back)
cost two passes over it at 2-3x the time (BENCHMARKS.md).

The buffers are views of flat storages allocated once per search and reused: a freshly allocated
tensor pays a page fault per page on first write wherever the allocator has handed the memory back
to the OS, which once took a fifth of beam search (BENCHMARKS.md). When rows leave the batch, the
same storages are viewed with fewer rows.

Cross-attention keys/values are computed once per source and kept once per source: with `group`
rows (beams) per source they are (N / group, H, S, Dh), and each source's beams attend to them
together as one group of queries. A model with copy attention keeps its copy keys and source ids
the same way.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from seqlab.model.copy import CopySource

KV = tuple[Tensor, Tensor]


class KVBuffer:
    """One layer's self-attention keys and values so far: (capacity, rows, H, Dh) views of flat storages."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.length, self.rows = capacity, 0, 0
        self.heads: tuple[int, int] = (0, 0)  # (H, Dh)
        self.stores: list[Tensor] = []  # [keys, values], flat

    def _view(self, store: Tensor, rows: int) -> Tensor:
        h, dh = self.heads
        return store[: self.capacity * rows * h * dh].view(self.capacity, rows, h, dh)

    @property
    def k(self) -> Tensor:
        return self._view(self.stores[0], self.rows)  # (capacity, rows, H, Dh)

    @property
    def v(self) -> Tensor:
        return self._view(self.stores[1], self.rows)

    def live(self) -> KV:
        """The keys and values of the live rows so far, (rows, H, length, Dh) views."""
        return self.k[: self.length].permute(1, 2, 0, 3), self.v[: self.length].permute(1, 2, 0, 3)

    def append(self, k: Tensor, v: Tensor) -> KV:
        """Store (N, H, T, Dh) new keys/values; return all of them so far as views."""
        n, h, t, dh = k.shape
        if not self.stores:
            self.capacity, self.rows, self.heads = max(self.capacity, t), n, (h, dh)
            self.stores = [k.new_empty(self.capacity * n * h * dh) for _ in range(2)]
        elif self.length + t > self.capacity:
            self._grow(max(2 * self.capacity, self.length + t))
        if n != self.rows:
            raise ValueError(f"the cache holds {self.rows} rows but the decoder step has {n}")
        self.k[self.length : self.length + t] = k.permute(2, 0, 1, 3)
        self.v[self.length : self.length + t] = v.permute(2, 0, 1, 3)
        self.length += t
        return self.live()  # (N, H, T_all, Dh)

    def _grow(self, capacity: int) -> None:
        old = [self._view(store, self.rows)[: self.length] for store in self.stores]
        self.capacity = capacity
        self.stores = [x.new_empty(capacity * x[0].numel()) for x in old]
        for store, x in zip(self.stores, old, strict=True):
            self._view(store, self.rows)[: self.length] = x

    def select(self, index: Tensor) -> KVBuffer:
        """A new buffer holding rows `index` (any subset or order); this one is unchanged."""
        out = KVBuffer(self.capacity)
        if self.stores:
            k, v = self.live()
            out.append(k.index_select(0, index), v.index_select(0, index))
        return out

    def take_(self, index: Tensor, spare: Tensor | None = None) -> Tensor | None:
        """In place: row i becomes old row index[i] (any subset, order or repeats).

        Each storage is gathered into `spare` (a flat tensor, or None), which then holds it; the storage
        it replaced is returned, to be the next call's spare. A spare too small for the rows is replaced.
        """
        if not self.stores:
            return spare
        m = index.shape[0]
        for i, store in enumerate(self.stores):
            needed = self.capacity * m * self.heads[0] * self.heads[1]
            if spare is None or spare.numel() < needed or spare.dtype != store.dtype:
                spare = store.new_empty(max(needed, store.numel()))
            torch.index_select(self._view(store, self.rows)[: self.length], 1, index,
                               out=self._view(spare, m)[: self.length])
            self.stores[i], spare = spare, store
        self.rows = m
        return spare


class DecoderCache:
    """Everything incremental decoding keeps between steps; rows along dim 0."""

    def __init__(self, cross_kv: tuple[KV, ...], cross_mask: Tensor, group: int = 1, capacity: int = 64,
                 copy: CopySource | None = None) -> None:
        self.layers = [KVBuffer(capacity) for _ in cross_kv]
        self.cross_kv, self.cross_mask, self.group = cross_kv, cross_mask, group  # cross: (G, H, S, Dh)
        self.copy = copy  # per source, like cross_kv
        self.spare: Tensor | None = None  # the storage the next row move gathers into (KVBuffer.take_)

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
        self._take_(index)
        moved = self._with_sources(self.layers, self.group, lambda t: t.index_select(0, sources))
        self.cross_kv, self.cross_mask, self.copy = moved.cross_kv, moved.cross_mask, moved.copy

    def expand_(self, group: int) -> None:
        """In place: each row of a cache with one row per source becomes `group` equal rows, the source's
        beams. Beam search runs its first step on one row per source, where all beams are the same."""
        if self.group != 1:
            raise ValueError(f"expand_: the cache already has {self.group} rows per source")
        self._take_(torch.arange(self.cross_mask.shape[0], device=self.cross_mask.device).repeat_interleave(group))
        self.group = group

    def rearrange_(self, index: Tensor) -> None:
        """In place, for beam search: row i takes row index[i], from the same source (the sources stay)."""
        self._take_(index)

    def _take_(self, index: Tensor) -> None:
        for layer in self.layers:
            self.spare = layer.take_(index, self.spare)

    def ungroup(self) -> DecoderCache:
        """The same cache with its per-source tensors repeated per row (group 1)."""
        if self.group == 1:
            return self
        return self._with_sources(self.layers, 1, lambda t: t.repeat_interleave(self.group, 0))

    def _with_sources(self, layers: list[KVBuffer], group: int, pick: Callable[[Tensor], Tensor]) -> DecoderCache:
        """A cache with these self-attention buffers and every per-source tensor passed through `pick`."""
        out = DecoderCache.__new__(DecoderCache)
        out.layers, out.group, out.spare = layers, group, None
        out.cross_kv = tuple((pick(k), pick(v)) for k, v in self.cross_kv)
        out.cross_mask = pick(self.cross_mask)
        out.copy = CopySource(pick(self.copy.keys), pick(self.copy.ids)) if self.copy is not None else None
        return out
