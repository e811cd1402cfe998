"""From corpus to batches: tokenize once (cached), filter or truncate, batch by token budget."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import lightning as L
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader

from seqlab.constants import BOS_ID, PAD_ID, TRAIN, VALIDATION
from seqlab.data.batching import TokenBudgetBatchSampler
from seqlab.data.config import DataConfig
from seqlab.data.mapped import AnyTokenizer
from seqlab.data.prepare import TokenizedSplit, load_tokenizer, tokenized_split
from seqlab.data.sequences import pad_right

log = logging.getLogger(__name__)


@dataclass
class Batch:
    """A padded batch. Decoder input is BOS + target, decoder output target + EOS."""

    src_ids: Tensor  # (B, S)
    src_pad_mask: Tensor  # (B, S) bool, True at padding
    tgt_in: Tensor  # (B, T)
    tgt_out: Tensor  # (B, T), PAD where there is no target
    index: Tensor  # (B,) example indices into the split
    pad_id: int = PAD_ID

    @property
    def n_tokens(self) -> int:
        """Real (non-pad) source plus target tokens."""
        return int((~self.src_pad_mask).sum() + (self.tgt_out != self.pad_id).sum())

    def pin_memory(self) -> Batch:
        """The batch in page-locked memory (what a DataLoader with pin_memory=True calls on a custom type), so
        the copy to the GPU can overlap the step before it."""
        return Batch(*(t.pin_memory() for t in (self.src_ids, self.src_pad_mask, self.tgt_in, self.tgt_out,
                                                 self.index)), self.pad_id)


@dataclass(frozen=True)
class Collate:
    """Right-pad sources and targets; the decoder input starts with the decoder start token (BOS). The ids
    are the model's: seqlab's constants, or an imported family's (BART: pad 1, start 2)."""

    pad_id: int = PAD_ID
    bos_id: int = BOS_ID

    def __call__(self, items: list[tuple[int, np.ndarray, np.ndarray]]) -> Batch:
        src, src_pad = pad_right([s for _, s, _ in items], self.pad_id)
        tgt_out, tgt_pad = pad_right([t for _, _, t in items], self.pad_id)
        tgt_in = torch.cat([torch.full_like(tgt_out[:, :1], self.bos_id), tgt_out[:, :-1]], dim=1)  # shift right
        tgt_in = tgt_in.masked_fill(tgt_pad, self.pad_id)  # (B, T): EOS is only ever an output
        index = torch.tensor([i for i, _, _ in items], dtype=torch.long)
        return Batch(src, src_pad, tgt_in, tgt_out, index, self.pad_id)


collate = Collate()  # seqlab's own ids


class ResumableLoader(DataLoader):
    """A DataLoader whose state (epoch, batches consumed) Lightning saves and restores.

    `consumed` reads how many batches the trainer has finished this epoch, so a
    resumed run skips exactly those and continues the same order.
    """

    def __init__(self, *args: Any, consumed: Any = lambda: 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._consumed = consumed

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.batch_sampler.epoch, "consumed": int(self._consumed())}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.batch_sampler.set_epoch(state["epoch"])
        self.batch_sampler.skip = state["consumed"]


class Seq2SeqDataModule(L.LightningDataModule):
    """Tokenizer + tokenized train/validation splits + token-budget loaders."""

    def __init__(self, cfg: DataConfig, tokenizer: AnyTokenizer | None = None) -> None:
        """`tokenizer`: a pretrained model's own (fine-tuning), used as it is; else trained on the corpus."""
        super().__init__()
        self.cfg = cfg
        self.tokenizer: AnyTokenizer | None = tokenizer
        self.splits: dict[str, TokenizedSplit] = {}

    @property
    def collate(self) -> Collate:
        tok = self.tokenizer
        return Collate(tok.pad_id, tok.bos_id) if tok is not None else collate

    def prepare_data(self) -> None:
        """Tokenizer and token ids into the cache. Lightning runs this in one process per node (local
        rank 0) while the other ranks wait, so no rank tokenizes twice; `setup` then only opens it."""
        tokenizer = self.tokenizer if self.tokenizer is not None else load_tokenizer(self.cfg)
        for split in (TRAIN, VALIDATION):
            tokenized_split(self.cfg, tokenizer, split)

    def setup(self, stage: str | None = None) -> None:
        if self.tokenizer is None:
            self.tokenizer = load_tokenizer(self.cfg)
        for split in (TRAIN, VALIDATION):
            if split not in self.splits:
                self.splits[split] = tokenized_split(self.cfg, self.tokenizer, split)

    def sampler(self, split: str, shuffle: bool) -> TokenBudgetBatchSampler:
        data = self.splits[split]
        trainer = self.trainer
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        sampler = TokenBudgetBatchSampler(
            data.src_lens, data.tgt_lens, self.cfg.max_tokens, shuffle=shuffle, seed=self.cfg.seed,
            rank=rank, world_size=world, max_sentences=self.cfg.max_sentences)
        if trainer is not None:
            sampler.set_epoch(trainer.current_epoch)
        return sampler

    def pinned(self) -> bool:
        """Whether the loaders pin their batches: asked for (data.pin_memory) and the batches go to a GPU."""
        trainer = self.trainer
        return self.cfg.pin_memory and trainer is not None and trainer.strategy.root_device.type == "cuda"

    def _loader(self, split: str, shuffle: bool) -> ResumableLoader:
        sampler = self.sampler(split, shuffle)
        if shuffle:
            log.info("%s: %d batches per rank, padding ratio %.3f", split, len(sampler), sampler.padding_ratio())
        trainer = self.trainer
        consumed = (lambda: trainer.fit_loop.epoch_loop.batch_progress.current.processed) if trainer else (lambda: 0)
        return ResumableLoader(
            self.splits[split], batch_sampler=sampler, collate_fn=self.collate, num_workers=self.cfg.num_workers,
            generator=torch.Generator(),  # never draws from the global RNG, which dropout uses
            consumed=consumed, persistent_workers=self.cfg.num_workers > 0, pin_memory=self.pinned())

    def train_dataloader(self) -> DataLoader:
        return self._loader(TRAIN, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        sampler = self.sampler(VALIDATION, shuffle=False)
        return DataLoader(self.splits[VALIDATION], batch_sampler=sampler, collate_fn=self.collate,
                          num_workers=self.cfg.num_workers, generator=torch.Generator(), pin_memory=self.pinned())
