"""Token-budget batches with length bucketing, reproducible and DDP-aware.

Like fairseq's `--max-tokens`: a batch holds as many examples as fit in
`max_tokens` padded tokens, counting each example as max(source, target) length
times the batch size. Examples are sorted by length (ties broken at random per
epoch) so neighbours have similar lengths and little padding, then batches are
shuffled. Under DDP every rank takes every world_size-th batch of one shared
order; the last (len % world_size) batches of an epoch are dropped so that all
ranks run the same number of steps. They differ every epoch, as the order does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np
from torch.utils.data import Sampler

log = logging.getLogger(__name__)


def make_batches(sizes: np.ndarray, max_tokens: int, max_sentences: int | None = None) -> list[np.ndarray]:
    """Greedy batches of indices in the given order so that len(batch) * max(size) <= max_tokens."""
    batches, start, longest = [], 0, 0
    for i, size in enumerate(sizes):
        if size > max_tokens:
            raise ValueError(f"an example of {size} tokens exceeds data.max_tokens={max_tokens}; "
                             "raise max_tokens or lower the maximum lengths")
        grown = max(longest, int(size))
        full = max_sentences is not None and i - start >= max_sentences
        if (i - start + 1) * grown > max_tokens or full:
            batches.append(np.arange(start, i))
            start, grown = i, int(size)
        longest = grown
    if start < len(sizes):
        batches.append(np.arange(start, len(sizes)))
    return batches


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Yields lists of example indices; `set_epoch` changes the order, `skip` resumes mid-epoch."""

    def __init__(
        self, src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int, *, shuffle: bool = True,
        seed: int = 0, rank: int = 0, world_size: int = 1, max_sentences: int | None = None,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside world size {world_size}")
        self.src_lens, self.tgt_lens = np.asarray(src_lens), np.asarray(tgt_lens)
        self.sizes = np.maximum(self.src_lens, self.tgt_lens)
        self.max_tokens, self.max_sentences = max_tokens, max_sentences
        self.shuffle, self.seed, self.rank, self.world_size = shuffle, seed, rank, world_size
        self.epoch, self.skip = 0, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """All batches of one epoch, before sharding, as arrays of example indices."""
        rng = np.random.default_rng((self.seed, epoch))
        tiebreak = rng.permutation(len(self.sizes)) if self.shuffle else np.arange(len(self.sizes))
        order = tiebreak[np.argsort(self.sizes[tiebreak], kind="stable")]
        batches = [order[b] for b in make_batches(self.sizes[order], self.max_tokens, self.max_sentences)]
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def rank_batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's shard: disjoint from every other rank's, and equally long."""
        batches = self.epoch_batches(epoch)
        usable = len(batches) - len(batches) % self.world_size
        if usable == 0:
            raise ValueError(f"{len(batches)} batches cannot feed {self.world_size} ranks; lower data.max_tokens")
        return batches[self.rank : usable : self.world_size]

    def padding_ratio(self, epoch: int = 0) -> float:
        """Share of padded positions in this rank's batches (source and target together)."""
        padded = real = 0
        for b in self.rank_batches(epoch):
            padded += len(b) * int(self.src_lens[b].max() + self.tgt_lens[b].max())
            real += int(self.src_lens[b].sum() + self.tgt_lens[b].sum())
        return 1.0 - real / max(padded, 1)

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.rank_batches(self.epoch)
        skip, self.skip = self.skip, 0  # resume skips once, within the restored epoch
        for b in batches[skip:]:
            yield b.tolist()

    def __len__(self) -> int:
        return len(self.rank_batches(self.epoch))
