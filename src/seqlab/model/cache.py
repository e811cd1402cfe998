"""The decoder's incremental-decoding cache: preallocated self-attention buffers, shared cross-attention.

Self-attention keys/values of each layer live in (slots, H, capacity, Dh) buffers, of which the first
`rows` slots are live: a step writes its new keys/values in place (no concatenation). Each (row, head)'s
keys are one run of memory, which a decoding step's attention reads as it is, and which a row moves as one
run. The layers' buffers are views of one tensor (`Slab`, (2 * layers, slots, H, capacity, Dh)), so that a
row moves for every layer in one copy. Time-major buffers (capacity, slots, H, Dh), gathered one
position at a time, made attention 1.3x slower and a beam's moves several times slower at GPT-2's shape
(docs/performance.md).

Searches move rows in place (`compact_`): each beam takes its parent's keys/values, and examples that
are done leave the batch. A move copies only the positions a row does not already hold. Beams share
most of their history (a row and its new parent usually differ only in their last few positions: in
beam 5 on the bench, 27% of the (row, position) pairs differ), and the caller says how many leading
positions of each row are already right (`kept`). The searches fill the slots of finished examples
with the last ones (`in_place_order`), so the examples that stay keep their slots. Copying every row
whole at every step took an eighth of beam search (docs/performance.md).

The buffers are allocated once per search: a freshly allocated tensor pays a page fault per page on
first write wherever the allocator has handed the memory back to the OS, which once took a fifth of
beam search (docs/performance.md).

A search whose rows advance by different numbers of tokens per step (speculative decoding) keeps `valid`, which
of each row's generated positions hold a token it kept: a rejected draft token becomes a hole, masked out of
every key, and each token's position counts the kept ones before it (as left padding is counted). Where the
holes come to a quarter of the generated positions, each row's kept ones move to the front (`_squeeze`), so the
buffers and every later call's attention stay about as long as the longest row. Without it every position is
valid, and the models compute exactly what they did before.

Cross-attention keys/values are computed once per source and kept once per source: with `group`
rows (beams) per source they are (N / group, H, S, Dh), and each source's beams attend to them
together as one group of queries. A model with copy attention keeps its copy keys and source ids
the same way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from seqlab.model.copy import CopySource

KV = tuple[Tensor, Tensor]


def in_place_order(keep: Tensor) -> Tensor:
    """(N,) bool -> the indices of the kept items, in the order that moves the fewest: with m kept, a kept
    item below m stays in its slot, and the kept items from m on fill the other slots below m."""
    m = int(keep.sum())
    order = torch.arange(m, device=keep.device)
    if m < keep.shape[0]:
        order[~keep[:m]] = keep[m:].nonzero().squeeze(1) + m
    return order


def shared_prefix(prefix: Tensor, index: Tensor) -> Tensor:
    """(R,) how many leading tokens row i of `prefix` (N, L) shares with row index[i], for i < R.

    In a search, equal token prefixes are one node of the search tree, and their cached keys/values
    are copies of the same numbers: that many leading positions of row i need no copy (`kept`)."""
    return (prefix[: index.shape[0]] == prefix[index]).int().cumprod(1).sum(1)


class Slab:
    """Every layer's self-attention keys and values in one tensor, (2 * layers, slots, H, capacity, Dh), of
    which the first `rows` slots are live. Each layer's, row's and head's positions are one run: a row that takes
    another's positions (a beam its parent's) copies 2 * layers * H runs, for every layer at once, and a layer's
    (rows, H, length, Dh) keys are a batch of matrices that attention multiplies in place."""

    def __init__(self, layers: int, capacity: int) -> None:
        self.layers, self.capacity, self.rows = layers, capacity, 0
        self.data: Tensor | None = None

    def allocate(self, like: Tensor, capacity: int) -> None:
        """Room for `capacity` positions of every layer, for keys/values shaped like `like` (N, H, T, Dh)."""
        n, h, _, dh = like.shape
        self.data = like.new_empty(2 * self.layers, n, h, capacity, dh)
        self.rows = n

    def take_(self, index: Tensor, length: int) -> None:
        """A new tensor of as many positions holding rows `index` (any number) of the first `length` positions."""
        d = self.data
        new = d.new_empty(d.shape[0], index.shape[0], d.shape[2], d.shape[3], d.shape[4])
        new[:, :, :, :length] = d[:, :, :, :length].index_select(1, index)
        self.data, self.rows = new, index.shape[0]

    def grow_(self, length: int, capacity: int) -> None:
        """A new tensor of `capacity` positions holding the live rows' first `length` positions as they are: one
        strided copy, where `take_`'s index_select would build the rows in a tensor of their own first (at GPT-2's
        shape, 4 live rows of 8 slots and 112 positions grown to 224: 6-13 ms against 14-79)."""
        d = self.data
        new = d.new_empty(d.shape[0], self.rows, d.shape[2], capacity, d.shape[4])
        new[:, :, :, :length] = d[:, : self.rows, :, :length]
        self.data = new

    def zero_from_(self, length: int) -> None:
        """Zeros at every layer's positions from `length` on (what a captured step's masked reads see)."""
        if self.data is not None:
            self.data[:, :, :, length:].zero_()

    def move_(self, target: Tensor, source: Tensor, start: Tensor, length: int, rows: int) -> None:
        """In place: row target[i] takes positions start[i]..length-1 of row source[i], at every layer and head
        ((K,) tensors; a row that is also read is read before it is written); `rows` slots stay live.

        On a CPU, one copy per row, of runs of positions; elsewhere one gather of every (row, position) entry,
        where a copy's launch would cost more than its bytes."""
        if self.data is not None and target.numel():
            if self.data.device.type == "cpu":
                copy_rows_(self.data, target.tolist(), source.tolist(), start.tolist(), length)
            else:
                gather_rows_(self.data, target, source, start, length)
        self.rows = rows


def copy_rows_(data: Tensor, target: list[int], source: list[int], start: list[int], length: int) -> None:
    """`Slab.move_` as one copy per moved row, in an order that reads every row before it is overwritten (a
    parallel move): a row is written once no move still to come reads it; rows left in a cycle (rows that take
    each other's positions) have one row saved first."""
    pending = {t: (s, a) for t, s, a in zip(target, source, start, strict=True) if t != s}  # a row is itself
    readers = Counter(s for s, _ in pending.values() if s in pending)  # moves still to come that read a row
    saved: dict[int, tuple[int, Tensor]] = {}  # a row saved before it was overwritten -> (first position, copy)
    ready = [t for t in pending if readers[t] == 0]
    while pending:
        while ready:
            t = ready.pop()
            s, a = pending.pop(t)
            if s in saved:
                lo, rows = saved[s]
                data[:, t, :, a:length].copy_(rows[:, :, a - lo :])
            else:
                data[:, t, :, a:length].copy_(data[:, s, :, a:length])
            if s in pending and s not in saved:
                readers[s] -= 1
                if readers[s] == 0:
                    ready.append(s)
        if pending:  # a cycle: save one of its rows, from the first position any move reads
            t = next(iter(pending))
            lo = min(a for s, a in pending.values() if s == t)
            saved[t] = (lo, data[:, t, :, lo:length].clone())
            ready.append(t)


def gather_rows_(data: Tensor, target: Tensor, source: Tensor, start: Tensor, length: int) -> None:
    """`Slab.move_` as one gather and one scatter of the (row, position) entries it moves."""
    positions = torch.arange(length, device=data.device)
    row, position = (positions[None, :] >= start[:, None]).nonzero(as_tuple=True)
    moved = data[:, source[row], :, position]  # (K, 2L, H, Dh): every source read before writing
    data[:, target[row], :, position] = moved


class KVBuffer:
    """One layer's self-attention keys and values so far: the first `rows` slots of (slots, H, capacity, Dh),
    its share of the cache's `Slab`."""

    def __init__(self, capacity: int, slab: Slab | None = None, layer: int = 0) -> None:
        self.slab = slab if slab is not None else Slab(1, capacity)
        self.layer, self.length = layer, 0
        self._data: Tensor | None = None  # the slab tensor that `_kv` views (views made once, not per use)
        self._kv: tuple[Tensor | None, Tensor | None] = (None, None)

    def _views(self) -> tuple[Tensor | None, Tensor | None]:
        if self.slab.data is not self._data:
            self._data = self.slab.data
            self._kv = (None, None) if self._data is None else (self._data[2 * self.layer],
                                                                  self._data[2 * self.layer + 1])
        return self._kv

    @property
    def k(self) -> Tensor | None:
        return self._views()[0]

    @property
    def v(self) -> Tensor | None:
        return self._views()[1]

    @property
    def rows(self) -> int:
        return self.slab.rows

    @property
    def capacity(self) -> int:
        """The positions the allocated buffer holds (the layout's business, not its readers')."""
        return self.k.shape[2]

    def live(self) -> KV:
        """The keys and values of the live rows so far, (rows, H, length, Dh) views."""
        keys, values = self._views()
        return keys[: self.rows, :, : self.length], values[: self.rows, :, : self.length]

    def append(self, k: Tensor, v: Tensor) -> KV:
        """Store (N, H, T, Dh) new keys/values; return all of them so far as views. The first layer to outgrow
        the slab grows it for all (every layer holds the same positions before a step)."""
        n, t = k.shape[0], k.shape[2]
        if self.slab.data is None:
            self.slab.allocate(k, max(self.slab.capacity, t))
        elif self.length + t > self.capacity:
            self.slab.grow_(self.length, max(2 * self.capacity, self.length + t))
        if n != self.rows:
            raise ValueError(f"the cache holds {self.rows} rows but the decoder step has {n}")
        keys, values = self._views()
        keys[:n, :, self.length : self.length + t] = k
        values[:n, :, self.length : self.length + t] = v
        self.length += t
        return self.live()  # (N, H, T_all, Dh)


def slabs(layers: list[KVBuffer]) -> list[Slab]:
    """The distinct slabs of these buffers (one for a cache's layers)."""
    return list({id(layer.slab): layer.slab for layer in layers}.values())


class StaticKV:
    """One layer's keys and values as a static decoder step sees them: every position of the slab's first `rows`
    slots, the step's keys/values written at a position held in a (1,) device tensor, so that one CUDA graph (or
    one compiled program) serves every step of a search (engines.graphs). Attention then reads all `capacity`
    positions, those after the step's masked; the buffer must hold finite numbers there (zeros:
    `Slab.zero_from_`), since a masked weight of 0 times a NaN left by the allocator is NaN.

    The write is one `index_put_` into the slab itself, not a copy into a view of it: TorchInductor turns a
    write into its input into an in-place one only there (into a view, it built the layer's whole buffer anew
    and copied it back, at every step)."""

    def __init__(self, slab: Tensor, layer: int, rows: int, position: Tensor) -> None:
        self.slab, self.position = slab, position
        self.k, self.v = slab[2 * layer, :rows], slab[2 * layer + 1, :rows]  # (rows, H, capacity, Dh)
        self.index = torch.arange(2 * layer, 2 * layer + 2, device=slab.device)[:, None, None]  # (2, 1, 1): k, v

    def append(self, k: Tensor, v: Tensor) -> KV:
        """Store (N, H, 1, Dh) new keys/values at the position; return every position's, (N, H, capacity, Dh)."""
        n, h = k.shape[:2]
        rows = torch.arange(n, device=k.device)[:, None]
        heads = torch.arange(h, device=k.device)[None, :]
        self.slab.index_put_((self.index, rows, heads, self.position), torch.stack([k[:, :, 0], v[:, :, 0]]))
        return self.k, self.v


@dataclass(frozen=True)
class StaticCache:
    """What a static step (`step_at`) reads of a cache, as plain tensors: the slab whole (its layers' buffers
    are cut from it inside the step, so a compiled step's inputs are no views at offsets of one storage, which
    TorchInductor's shape guards cannot follow), the per-source tensors whole as they were when the step was
    bound (a search's compaction later slices its own cache's to the sources left), and the rows the step
    computes."""

    slab: Tensor  # (2 * layers, slots, H, capacity, Dh)
    cross_kv: tuple[KV, ...]  # per layer (G, H, S, Dh); none for a one-stack model
    cross_mask: Tensor  # (G, 1, 1, S): the sources' key mask, or a one-stack model's prompt's
    group: int  # rows per source
    rows: int  # the first `rows` slots are computed

    @property
    def capacity(self) -> int:
        return self.slab.shape[3]

    def buffers(self, position: Tensor) -> list[StaticKV]:
        """Each layer's buffer, the step's keys/values written at `position`."""
        return [StaticKV(self.slab, layer, self.rows, position) for layer in range(self.slab.shape[0] // 2)]


class DecoderCache:
    """Everything incremental decoding keeps between steps; rows along dim 0."""

    def __init__(self, cross_kv: tuple[KV, ...], cross_mask: Tensor, group: int = 1, capacity: int = 64,
                 copy: CopySource | None = None, layers: int | None = None, prompt_length: int = 0) -> None:
        """`layers`: the self-attention layers (default: one per cross-attention). A one-stack model (no
        cross-attention) keeps its prompt's key mask (G, 1, 1, P) as `cross_mask`, the per-source mask that
        moves with the sources, and `prompt_length` = P, the positions the prompt takes in the buffers."""
        n = len(cross_kv) if layers is None else layers
        slab = Slab(n, capacity)
        self.layers = [KVBuffer(capacity, slab, i) for i in range(n)]
        self.cross_kv, self.cross_mask, self.group = cross_kv, cross_mask, group  # cross: (G, H, S, Dh)
        self.copy = copy  # per source, like cross_kv
        self.prompt_length = prompt_length
        # (N, generated positions) bool, True = a kept token; None: all are. Set by the search before each decode
        # to cover the positions after it (the new tokens' own validity included: a filler is not a key).
        self.valid: Tensor | None = None

    @property
    def length(self) -> int:
        return self.layers[0].length if self.layers else 0

    def admit_(self, valid: Tensor) -> None:
        """Before a decode of T new tokens: (N, T) bool, which of them are kept tokens (False: a filler that
        no key reads). Starts the validity record (all earlier positions kept) if there is none."""
        if self.valid is None:
            self.valid = valid.new_ones(valid.shape[0], self.length - self.prompt_length)
        self.valid = torch.cat([self.valid, valid], dim=1)

    def reject_(self, kept: Tensor) -> None:
        """After that decode: (N, T) bool, which of the T new positions stay (the others become holes). The
        last positions that no row keeps leave the buffers (the next decode writes over them): the cache grows
        by the longest run a row kept, and attention never reads a position that is a hole in every row."""
        self.valid[:, -kept.shape[1]:] &= kept
        holes = int((~kept.any(0)).flip(0).long().cumprod(0).sum())  # the last positions no row keeps
        if holes:
            self.valid = self.valid[:, : self.valid.shape[1] - holes]
            for layer in self.layers:
                layer.length -= holes
        self._squeeze()

    SQUEEZE = 0.25  # the share of the generated positions a squeeze must free

    def _squeeze(self) -> None:
        """Where it frees at least `SQUEEZE` of the generated positions: each row's kept positions moved, in
        order, to the front of its generated ones, the holes after them, and the positions that are then holes
        in every row dropped. A row keeps its own number of tokens a call, so the buffers grow by the most any
        row kept, and holes build up, which every later call's attention reads (at GPT-2's shape, 40 new tokens
        a row, 8 to 64 rows, every proposal of 5 verified: 140-166 positions, prompts included, in buffers grown
        to twice their room; squeezed, 97 at most). A token's position counts the kept tokens before it, and the
        order stays, so nothing else changes."""
        valid = self.valid
        generated, counts = valid.shape[1], valid.sum(1)
        width = int(counts.max())
        if generated - width < max(1, self.SQUEEZE * generated):
            return
        order = torch.sort((~valid).to(torch.uint8), dim=1, stable=True).indices[:, :width]  # (N, width): kept first
        start = self.prompt_length
        for slab in slabs(self.layers):
            region = slab.data[:, : slab.rows, :, start : start + generated]  # (2 layers, N, H, generated, Dh)
            index = order[None, :, None, :, None].expand(region.shape[0], -1, region.shape[2], -1, region.shape[4])
            slab.data[:, : slab.rows, :, start : start + width] = region.gather(3, index)
        self.valid = torch.arange(width, device=valid.device)[None, :] < counts[:, None]
        for layer in self.layers:
            layer.length = start + width

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
        out = self._with_sources(self._selected(index), self.group, lambda t: t.index_select(0, sources))
        out.valid = None if self.valid is None else self.valid.index_select(0, index)
        return out

    def _selected(self, index: Tensor) -> list[KVBuffer]:
        """New buffers (one new slab) holding rows `index` of these; these are unchanged."""
        slab = Slab(len(self.layers), self.layers[0].slab.capacity if self.layers else 0)
        if self.layers and self.layers[0].slab.data is not None:
            slab.data, slab.rows = self.layers[0].slab.data, self.layers[0].rows
            slab.take_(index, self.length)
        out = [KVBuffer(slab.capacity, slab, i) for i in range(len(self.layers))]
        for buffer in out:
            buffer.length = self.length
        return out

    def compact_(self, index: Tensor, kept: Tensor | None = None, same_sources: bool = False) -> None:
        """In place, what `reorder(index)` returns, with at most as many rows: beams moved, finished rows dropped.

        kept: (R,) how many leading positions row i already holds as row index[i] does (`shared_prefix`);
        by default all of them where index[i] == i, else none. Only the other positions are copied.
        same_sources: the caller knows that every group of rows stays with its own source (a beam step where
        no example left): the per-source tensors are neither checked nor moved.
        """
        length = self.length
        if kept is None:
            kept = torch.where(index == torch.arange(index.shape[0], device=index.device), length, 0)
        moved = (kept < length).nonzero().squeeze(1)  # rows that take positions from another
        for slab in slabs(self.layers):
            slab.move_(moved, index[moved], kept[moved], length, index.shape[0])
        if self.valid is not None:
            self.valid = self.valid.index_select(0, index)
        if same_sources:
            return
        sources = self._sources(index)
        g = sources.shape[0]
        moved = (sources != torch.arange(g, device=index.device)).nonzero().squeeze(1)
        if moved.numel() == 0 and g == self.cross_mask.shape[0]:
            return  # beams moved within their sources (most beam steps): the per-source tensors stay
        for x in (*(t for kv in self.cross_kv for t in kv), self.cross_mask):  # owned: moved in place
            x.index_copy_(0, moved, x.index_select(0, sources[moved]))
        self.cross_kv = tuple((k[:g], v[:g]) for k, v in self.cross_kv)
        self.cross_mask = self.cross_mask[:g]
        if self.copy is not None:  # holds the caller's source ids: copied, not moved
            self.copy = CopySource(self.copy.keys.index_select(0, sources), self.copy.ids.index_select(0, sources))

    def expand_(self, group: int) -> None:
        """In place: each row of a cache with one row per source becomes `group` equal rows, the source's
        beams. Beam search runs its first step on one row per source, where all beams are the same."""
        if self.group != 1:
            raise ValueError(f"expand_: the cache already has {self.group} rows per source")
        index = torch.arange(self.cross_mask.shape[0], device=self.cross_mask.device).repeat_interleave(group)
        self._take_(index)
        self.group = group

    def _take_(self, index: Tensor) -> None:
        """In place: the self-attention buffers hold rows `index` of theirs."""
        for slab in slabs(self.layers):
            if slab.data is not None:
                slab.take_(index, self.length)
        if self.valid is not None:
            self.valid = self.valid.index_select(0, index)

    def collapse_(self, index: Tensor) -> None:
        """In place: one row per source again, row `index[i]` of the grouped rows for the i-th one kept (each from
        its own source, in order; sources without a row leave). Contrastive search grows a cache to its K
        candidates per source (`expand_`) and keeps the chosen one."""
        self._take_(index)
        sources = index // self.group
        self.group = 1
        if sources.shape[0] == self.cross_mask.shape[0] and bool((sources == torch.arange(
                sources.shape[0], device=sources.device)).all()):
            return
        kept = self._with_sources(self.layers, 1, lambda t: t.index_select(0, sources))
        self.cross_kv, self.cross_mask, self.copy = kept.cross_kv, kept.cross_mask, kept.copy

    def static(self, rows: int) -> StaticCache:
        """This cache's buffers and per-source tensors as they are now, for a static step over `rows` rows."""
        (slab,) = slabs(self.layers)
        return StaticCache(slab.data, self.cross_kv, self.cross_mask, self.group, rows)

    def ungroup(self) -> DecoderCache:
        """The same cache with its per-source tensors repeated per row (group 1)."""
        if self.group == 1:
            return self
        return self._with_sources(self.layers, 1, lambda t: t.repeat_interleave(self.group, 0))

    def _with_sources(self, layers: list[KVBuffer], group: int, pick: Callable[[Tensor], Tensor]) -> DecoderCache:
        """A cache with these self-attention buffers and every per-source tensor passed through `pick`."""
        out = DecoderCache.__new__(DecoderCache)
        out.layers, out.group, out.prompt_length, out.valid = layers, group, self.prompt_length, self.valid
        out.cross_kv = tuple((pick(k), pick(v)) for k, v in self.cross_kv)
        out.cross_mask = pick(self.cross_mask)
        out.copy = CopySource(pick(self.copy.keys), pick(self.copy.ids)) if self.copy is not None else None
        return out
