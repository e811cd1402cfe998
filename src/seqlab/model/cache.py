"""The decoder's incremental-decoding cache: preallocated self-attention buffers, shared cross-attention.

Self-attention keys/values of each layer live in (N, H, capacity, Dh) buffers:
a step writes its new keys/values in place (no concatenation), and beam search
rearranges rows in place, copying only the rows whose beam changed.
Cross-attention keys/values are computed once per source and kept once per
source: with `group` rows (beams) per source they are (N / group, H, S, Dh), and
each source's beams attend to them together as one group of queries. A model
with copy attention keeps its copy keys and source ids the same way.

Searches move rows in place (`compact_`, `rearrange_`): every tensor keeps a spare of its own
size, made the first time rows move, and moved rows are written there. On CPU a freshly
allocated tensor costs a page fault per 4 KiB on first write (glibc does not reuse freed
aligned blocks that small allocations have pinned), which made rebuilding the cache each
time an example finished a fifth of beam search's time (BENCHMARKS.md).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from seqlab.model.copy import CopySource

KV = tuple[Tensor, Tensor]


class Rows:
    """A tensor whose first `n` rows (dim 0) are live, moved in place through a spare of the same size."""

    def __init__(self, data: Tensor) -> None:
        self.data, self.n = data, data.shape[0]
        self._spare: Tensor | None = None

    def live(self, length: int | None = None) -> Tensor:
        """The live rows; for (N, H, T, Dh) buffers, only the first `length` positions."""
        x = self.data[: self.n]
        return x if length is None else x[:, :, :length]

    def _scratch(self, m: int, length: int | None) -> Tensor:
        if self._spare is None:
            self._spare = torch.empty_like(self.data)
        out = self._spare[:m]
        return out if length is None else out[:, :, :length]

    def take_(self, index: Tensor, length: int | None = None) -> None:
        """Live row i becomes old live row index[i] (any subset or order; at most as many rows as stored)."""
        m = index.shape[0]
        if m > self.data.shape[0]:  # more rows than stored (a repeat): a new tensor, once
            self.data, self.n, self._spare = self.live(length).index_select(0, index), m, None
            return
        torch.index_select(self.live(length), 0, index, out=self._scratch(m, length))
        self.data, self._spare = self._spare, self.data
        self.n = m

    def copy_rows_(self, index: Tensor, changed: Tensor, length: int | None = None) -> None:
        """Rows `changed` take old rows index[changed]; the others stay (beams moving within a source)."""
        if changed.numel() == 0:
            return
        moved = self._scratch(changed.shape[0], length)
        torch.index_select(self.live(length), 0, index[changed], out=moved)  # read all before writing
        self.live(length).index_copy_(0, changed, moved)


class KVBuffer:
    """One layer's self-attention keys and values so far."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.length = capacity, 0
        self.k: Rows | None = None  # (N, H, capacity, Dh) each
        self.v: Rows | None = None

    def append(self, k: Tensor, v: Tensor) -> KV:
        """Store (N, H, T, Dh) new keys/values; return all of them so far as views."""
        n, h, t, dh = k.shape
        if self.k is None or self.length + t > self.k.data.shape[2]:
            stored = self.k.data.shape[2] if self.k is not None else 0
            grown = max(self.capacity, 2 * stored, self.length + t)
            new_k, new_v = k.new_empty(n, h, grown, dh), v.new_empty(n, h, grown, dh)
            if self.k is not None:
                new_k[:, :, : self.length] = self.k.live(self.length)
                new_v[:, :, : self.length] = self.v.live(self.length)
            self.k, self.v = Rows(new_k), Rows(new_v)
        if n != self.k.n:
            raise ValueError(f"cache holds {self.k.n} rows but the decoder step has {n}")
        self.k.live()[:, :, self.length : self.length + t] = k
        self.v.live()[:, :, self.length : self.length + t] = v
        self.length += t
        return self.k.live(self.length), self.v.live(self.length)  # (N, H, T_all, Dh)

    def select(self, index: Tensor) -> KVBuffer:
        """A new buffer holding rows `index` (any subset or order); this one is unchanged."""
        out = KVBuffer(self.capacity)
        if self.k is not None:
            out.append(self.k.live(self.length).index_select(0, index),
                       self.v.live(self.length).index_select(0, index))
        return out

    def take_(self, index: Tensor) -> None:
        """In place: row i becomes old row index[i] (any subset or order)."""
        if self.k is not None:
            self.k.take_(index, self.length)
            self.v.take_(index, self.length)

    def rearrange_(self, index: Tensor, changed: Tensor) -> None:
        """In place: row i becomes old row index[i]; only rows in `changed` are copied."""
        if self.k is not None:
            self.k.copy_rows_(index, changed, self.length)
            self.v.copy_rows_(index, changed, self.length)


class DecoderCache:
    """Everything incremental decoding keeps between steps; rows along dim 0."""

    def __init__(self, cross_kv: tuple[KV, ...], cross_mask: Tensor, group: int = 1, capacity: int = 64,
                 copy: CopySource | None = None) -> None:
        self.layers = [KVBuffer(capacity) for _ in cross_kv]
        self._cross = [(Rows(k), Rows(v)) for k, v in cross_kv]  # per source: (G, H, S, Dh)
        self.cross_mask, self.group = cross_mask, group
        self.copy = copy  # per source, like cross_kv

    @property
    def cross_kv(self) -> tuple[KV, ...]:
        """Each layer's cross-attention keys and values of the live sources, (G, H, S, Dh)."""
        return tuple((k.live(), v.live()) for k, v in self._cross)

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
        for k, v in self._cross:
            k.take_(sources)
            v.take_(sources)
        self.cross_mask = self.cross_mask.index_select(0, sources)
        if self.copy is not None:
            self.copy = CopySource(self.copy.keys.index_select(0, sources), self.copy.ids.index_select(0, sources))

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
        out._cross = [(Rows(pick(k)), Rows(pick(v))) for k, v in self.cross_kv]
        out.cross_mask = pick(self.cross_mask)
        out.copy = CopySource(pick(self.copy.keys), pick(self.copy.ids)) if self.copy is not None else None
        return out
