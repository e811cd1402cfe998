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
    # (B, T) True at the target tokens the loss counts, where padding cannot be told by its id (a causal LM that
    # pads with its EOS: PromptCollate); None: every token of tgt_out but PAD
    tgt_keep: Tensor | None = None

    @property
    def n_tokens(self) -> int:
        """Real (non-pad) source plus target tokens."""
        targets = self.tgt_keep.sum() if self.tgt_keep is not None else (self.tgt_out != self.pad_id).sum()
        return int((~self.src_pad_mask).sum() + targets)

    def pin_memory(self) -> Batch:
        """The batch in page-locked memory (what a DataLoader with pin_memory=True calls on a custom type), so
        the copy to the GPU can overlap the step before it."""
        keep = self.tgt_keep.pin_memory() if self.tgt_keep is not None else None
        return Batch(*(t.pin_memory() for t in (self.src_ids, self.src_pad_mask, self.tgt_in, self.tgt_out,
                                                 self.index)), self.pad_id, keep)


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


@dataclass(frozen=True)
class PromptCollate:
    """An imported causal LM's supervised fine-tuning layout (TRL's completion-only collator; ALMA, Xu et al.
    2024): each item is a prompt and its continuation (the target's tokens and the end token). The sequence is
    prompt + continuation, as decoding continues it (decoding.prompts): the prompt without its last token is the
    source, that token the first decoder input, the continuation the outputs. The loss counts the
    continuation's tokens only (`tgt_keep`), its end token included, whatever the padding's id."""

    pad_id: int

    def __call__(self, items: list[tuple[int, np.ndarray, np.ndarray]]) -> Batch:
        prompts = [np.asarray(s) for _, s, _ in items]
        if any(len(p) == 0 for p in prompts):
            raise ValueError("an empty prompt: a causal LM continues its prompt's last token")
        src, src_pad = pad_right([p[:-1] for p in prompts], self.pad_id)
        tgt_out, tgt_pad = pad_right([t for _, _, t in items], self.pad_id)
        starts = torch.tensor([int(p[-1]) for p in prompts], dtype=torch.long)
        tgt_in = torch.cat([starts[:, None], tgt_out[:, :-1]], dim=1).masked_fill(tgt_pad, self.pad_id)  # (B, T)
        index = torch.tensor([i for i, _, _ in items], dtype=torch.long)
        return Batch(src, src_pad, tgt_in, tgt_out, index, self.pad_id, ~tgt_pad)


class ResumableLoader(DataLoader):
    """A DataLoader whose state (batches consumed) Lightning saves and restores, its batch order the trainer's
    epoch's.

    `consumed` reads how many batches the trainer has finished this epoch, so a resumed run skips exactly those
    and continues the same order; `epoch` reads the trainer's epoch, which orders the batches of each epoch
    (Lightning tells a loader's sampler the epoch, never its batch sampler); `reshuffle=False` keeps the first
    epoch's order in every epoch. A run cut after an epoch's last batch resumes at the next epoch's first.
    """

    def __init__(self, *args: Any, consumed: Any = lambda: 0, epoch: Any = lambda: 0, reshuffle: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._consumed, self._epoch, self._reshuffle = consumed, epoch, reshuffle
        self._ahead = 0  # 1: restored after an epoch's last batch, this iterator serves the next epoch

    def __iter__(self) -> Any:
        epoch, self._ahead = int(self._epoch()) + self._ahead, 0
        self.batch_sampler.set_epoch(epoch if self._reshuffle else 0)
        return super().__iter__()

    def state_dict(self) -> dict[str, int]:
        return {"epoch": int(self._epoch()), "consumed": int(self._consumed())}

    def load_state_dict(self, state: dict[str, int]) -> None:
        consumed = int(state["consumed"])
        finished = consumed >= len(self.batch_sampler)  # Lightning goes on to the next epoch with this iterator
        self.batch_sampler.skip, self._ahead = (0, 1) if finished else (consumed, 0)


class Seq2SeqDataModule(L.LightningDataModule):
    """Tokenizer + tokenized train/validation splits + token-budget loaders."""

    def __init__(self, cfg: DataConfig, tokenizer: AnyTokenizer | None = None, prompted: bool = False) -> None:
        """`tokenizer`: a pretrained model's own (fine-tuning), used as it is; else trained on the corpus.
        `prompted`: its sources are an imported causal LM's prompts, continued by its targets (PromptCollate)."""
        super().__init__()
        self.cfg, self.prompted = cfg, prompted
        self.tokenizer: AnyTokenizer | None = tokenizer
        self.splits: dict[str, TokenizedSplit] = {}

    @property
    def collate(self) -> Collate | PromptCollate:
        tok = self.tokenizer
        if self.prompted:
            assert tok is not None
            return PromptCollate(tok.pad_id)
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
        # the epoch Lightning is starting (what it tells a sampler's set_epoch), also right after a restore
        epoch = (lambda: trainer.fit_loop.epoch_progress.current.processed) if trainer else (lambda: 0)
        return ResumableLoader(
            self.splits[split], batch_sampler=sampler, collate_fn=self.collate, num_workers=self.cfg.num_workers,
            generator=torch.Generator(),  # never draws from the global RNG, which dropout uses
            consumed=consumed, epoch=epoch, reshuffle=self.cfg.shuffle_each_epoch,
            persistent_workers=self.cfg.num_workers > 0, pin_memory=self.pinned())

    def train_dataloader(self) -> DataLoader:
        return self._loader(TRAIN, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        sampler = self.sampler(VALIDATION, shuffle=False)
        return DataLoader(self.splits[VALIDATION], batch_sampler=sampler, collate_fn=self.collate,
                          num_workers=self.cfg.num_workers, generator=torch.Generator(), pin_memory=self.pinned())
