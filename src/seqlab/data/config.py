"""The data settings: corpus, tokenizer, length limits and batching (what `data=` in a config chooses)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from seqlab.config import ConfigError, check_types, typed
from seqlab.data.corpora import CorpusConfig
from seqlab.data.tokenizer import TokenizerConfig


@dataclass(frozen=True)
class DataConfig:
    """Corpus, tokenizer, length limits and batching. Lengths count tokens including EOS."""

    corpus: CorpusConfig
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    max_source_len: int = 256
    max_target_len: int = 256
    max_tokens: int = 4096
    max_sentences: int | None = None
    # a new batch order every epoch (fairseq's); false: the first epoch's order in every epoch, as the archived
    # recipes (conf/experiment) were trained
    shuffle_each_epoch: bool = True
    num_workers: int = 0  # loader processes; 0 collates in the training process (cheapest on a few CPU cores)
    pin_memory: bool = True  # page-locked batches when they go to a GPU (copied asynchronously); no effect on a CPU
    prepare_threads: int | None = None  # tokenizing threads when preparing the cache; None: every core
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
        if self.prepare_threads is not None and self.prepare_threads < 1:
            raise ConfigError(f"data.prepare_threads={self.prepare_threads} must be >= 1, or null for every core")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = "data") -> DataConfig:
        """From a plain mapping (a config group, a checkpoint's record), naming any unknown key."""
        values = dict(values)
        corpus = typed(CorpusConfig, dict(values.pop("corpus")), f"{where}.corpus")
        tokenizer = typed(TokenizerConfig, dict(values.pop("tokenizer", {})), f"{where}.tokenizer")
        return typed(cls, {"corpus": corpus, "tokenizer": tokenizer, **values}, where)
