"""From corpus to batches: tokenize once (cached), filter or truncate, batch by token budget."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from seqlab.config import ConfigError, check_types
from seqlab.constants import BOS_ID, PAD_ID, TRAIN, VALIDATION
from seqlab.data.batching import TokenBudgetBatchSampler
from seqlab.data.corpora import CorpusConfig, Example, load_split
from seqlab.data.sequences import pad_right, truncate
from seqlab.data.tokenizer import Tokenizer, TokenizerConfig
from seqlab.io import atomic_write, cache_key

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataConfig:
    """Corpus, tokenizer, length limits and batching. Lengths count tokens including EOS."""

    corpus: CorpusConfig
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    max_source_len: int = 256
    max_target_len: int = 256
    max_tokens: int = 4096
    max_sentences: int | None = None
    num_workers: int = 0
    seed: int = 0
    cache_dir: str = "cache"

    def __post_init__(self) -> None:
        check_types(self, "data")
        for name in ("max_source_len", "max_target_len", "max_tokens"):
            if getattr(self, name) < 2:
                raise ConfigError(f"data.{name}={getattr(self, name)} must be at least 2 (a token and EOS)")
        if self.max_sentences is not None and self.max_sentences < 1:
            raise ConfigError(f"data.max_sentences={self.max_sentences} must be positive, or null for no limit")
        if self.num_workers < 0:
            raise ConfigError(f"data.num_workers={self.num_workers} must be >= 0")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DataConfig:
        d = dict(d)
        return cls(corpus=CorpusConfig(**d.pop("corpus")), tokenizer=TokenizerConfig(**d.pop("tokenizer")), **d)


@dataclass
class Batch:
    """A padded batch. Decoder input is BOS + target, decoder output target + EOS."""

    src_ids: Tensor  # (B, S)
    src_pad_mask: Tensor  # (B, S) bool, True at padding
    tgt_in: Tensor  # (B, T)
    tgt_out: Tensor  # (B, T), PAD where there is no target
    index: Tensor  # (B,) example indices into the split

    @property
    def n_tokens(self) -> int:
        """Real (non-pad) source plus target tokens."""
        return int((~self.src_pad_mask).sum() + (self.tgt_out != PAD_ID).sum())


class TokenizedSplit(Dataset):
    """Token ids of one split as two flat arrays with offsets (memory-light, fast to cache)."""

    def __init__(self, src: list[list[int]], tgt: list[list[int]]) -> None:
        self.src_flat, self.src_off = _flatten(src)
        self.tgt_flat, self.tgt_off = _flatten(tgt)

    def __len__(self) -> int:
        return len(self.src_off) - 1

    def __getitem__(self, i: int) -> tuple[int, np.ndarray, np.ndarray]:
        return (i, self.src_flat[self.src_off[i] : self.src_off[i + 1]],
                self.tgt_flat[self.tgt_off[i] : self.tgt_off[i + 1]])

    @property
    def src_lens(self) -> np.ndarray:
        return np.diff(self.src_off)

    @property
    def tgt_lens(self) -> np.ndarray:
        return np.diff(self.tgt_off)

    def save(self, path: Path) -> None:
        arrays = {"src_flat": self.src_flat, "src_off": self.src_off,
                  "tgt_flat": self.tgt_flat, "tgt_off": self.tgt_off}
        atomic_write(path, lambda f: np.savez(f, **arrays))

    @classmethod
    def load(cls, path: Path) -> TokenizedSplit:
        self = cls.__new__(cls)
        with np.load(path) as z:
            self.src_flat, self.src_off, self.tgt_flat, self.tgt_off = (
                z["src_flat"], z["src_off"], z["tgt_flat"], z["tgt_off"])
        return self


def _flatten(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in seqs], out=offsets[1:])
    flat = np.fromiter((t for s in seqs for t in s), dtype=np.int32, count=int(offsets[-1]))
    return flat, offsets


def fit_lengths(src: list[list[int]], tgt: list[list[int]], cfg: DataConfig, split: str
                ) -> tuple[list[list[int]], list[list[int]]]:
    """Summarization truncates long sources/targets; translation drops over-long pairs. Both are logged."""
    long_src = sum(len(s) > cfg.max_source_len for s in src)
    long_tgt = sum(len(t) > cfg.max_target_len for t in tgt)
    if cfg.corpus.task == "summarization":
        if long_src or long_tgt:
            log.info("%s/%s: truncated %d sources to %d tokens and %d targets to %d tokens", cfg.corpus.name,
                     split, long_src, cfg.max_source_len, long_tgt, cfg.max_target_len)
        return ([truncate(s, cfg.max_source_len) for s in src], [truncate(t, cfg.max_target_len) for t in tgt])
    keep = [i for i, (s, t) in enumerate(zip(src, tgt, strict=True))
            if len(s) <= cfg.max_source_len and len(t) <= cfg.max_target_len]
    if len(keep) < len(src):
        log.info("%s/%s: dropped %d of %d pairs longer than %d/%d tokens", cfg.corpus.name, split,
                 len(src) - len(keep), len(src), cfg.max_source_len, cfg.max_target_len)
    return [src[i] for i in keep], [tgt[i] for i in keep]


def load_tokenizer(cfg: DataConfig) -> Tokenizer:
    """The tokenizer for this corpus and settings: from cache, or trained on the train split."""
    train: list[Example] = []

    def texts(side: str) -> list[str]:
        if not train:
            train.extend(load_split(cfg.corpus, TRAIN))
        return [getattr(e, side) for e in train]

    return Tokenizer.cached(Path(cfg.cache_dir), cfg.corpus.fingerprint(),
                            lambda: texts("source"), lambda: texts("target"), cfg.tokenizer)


def tokenized_split(cfg: DataConfig, tokenizer: Tokenizer, split: str) -> TokenizedSplit:
    """Token ids of a split after length handling, cached under a key of every input that matters."""
    key = cache_key({"corpus": cfg.corpus.fingerprint(), "tokenizer": tokenizer.digest,
                     "tok_cfg": asdict(cfg.tokenizer), "max": (cfg.max_source_len, cfg.max_target_len),
                     "task": cfg.corpus.task})
    path = Path(cfg.cache_dir) / f"data-{key}" / f"{split}.npz"
    if path.exists():
        return TokenizedSplit.load(path)
    examples = load_split(cfg.corpus, split)
    src = tokenizer.encode_source([e.source for e in examples])
    tgt = tokenizer.encode_target([e.target for e in examples])
    data = TokenizedSplit(*fit_lengths(src, tgt, cfg, split))
    data.save(path)
    return data


def collate(items: list[tuple[int, np.ndarray, np.ndarray]]) -> Batch:
    """Right-pad sources and targets; the decoder input starts with BOS."""
    src, src_pad = pad_right([s for _, s, _ in items], PAD_ID)
    tgt_out, tgt_pad = pad_right([t for _, _, t in items], PAD_ID)
    tgt_in = torch.cat([torch.full_like(tgt_out[:, :1], BOS_ID), tgt_out[:, :-1]], dim=1)  # shift right
    tgt_in = tgt_in.masked_fill(tgt_pad, PAD_ID)  # (B, T): EOS is only ever an output
    index = torch.tensor([i for i, _, _ in items], dtype=torch.long)
    return Batch(src, src_pad, tgt_in, tgt_out, index)


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

    def __init__(self, cfg: DataConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tokenizer: Tokenizer | None = None
        self.splits: dict[str, TokenizedSplit] = {}

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

    def _loader(self, split: str, shuffle: bool) -> ResumableLoader:
        sampler = self.sampler(split, shuffle)
        if shuffle:
            log.info("%s: %d batches per rank, padding ratio %.3f", split, len(sampler), sampler.padding_ratio())
        trainer = self.trainer
        consumed = (lambda: trainer.fit_loop.epoch_loop.batch_progress.current.processed) if trainer else (lambda: 0)
        return ResumableLoader(
            self.splits[split], batch_sampler=sampler, collate_fn=collate, num_workers=self.cfg.num_workers,
            generator=torch.Generator(),  # never draws from the global RNG, which dropout uses
            consumed=consumed, persistent_workers=self.cfg.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        return self._loader(TRAIN, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        sampler = self.sampler(VALIDATION, shuffle=False)
        return DataLoader(self.splits[VALIDATION], batch_sampler=sampler, collate_fn=collate,
                          num_workers=self.cfg.num_workers, generator=torch.Generator())
