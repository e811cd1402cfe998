"""Subword tokenizer: SentencePiece (unigram or BPE) trained on the train split.

The special ids come from `seqlab.constants` and are fixed at training time, so
every model, batch and decoder agrees on them. A tokenizer is its model bytes:
cached on disk under a key of corpus and settings, and saved inside checkpoints.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import sentencepiece as spm

from seqlab.config import ConfigError, check_choice, check_types
from seqlab.constants import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from seqlab.digest import cache_key
from seqlab.io import atomic_write, atomic_write_text, publish_once

log = logging.getLogger(__name__)
ModelType = Literal["unigram", "bpe"]
SAMPLING_VERSION = 2  # 2: the training sample is drawn by seqlab (deterministic), not by SentencePiece


@dataclass(frozen=True)
class TokenizerConfig:
    """SentencePiece settings. `joint=True` trains one vocabulary on source+target text."""

    vocab_size: int = 8000
    model_type: ModelType = "unigram"
    joint: bool = True
    character_coverage: float = 1.0
    byte_fallback: bool = True  # unseen characters (emoji, new scripts) survive as bytes
    normalization: str = "nmt_nfkc"
    # the training sample (SentencePiece's `input_sentence_size`, drawn by seqlab): the trainer's memory grows
    # with the sample (~2.5 GiB per million Bible-length sentences), not with the corpus, and 800k keeps
    # preparing a WMT-size corpus under 3 GiB (docs/performance.md). It changes the vocabulary of larger corpora
    # only (a corpus with fewer texts is used whole); raise it where memory allows
    max_sentences: int = 800_000
    seed: int = 0

    def __post_init__(self) -> None:
        check_types(self, "data.tokenizer")
        check_choice("data.tokenizer", "model_type", self.model_type, ModelType)
        if self.vocab_size < 300:
            raise ConfigError(f"data.tokenizer.vocab_size={self.vocab_size} is too small; use at least 300")


class Tokenizer:
    """Source and target SentencePiece processors (one and the same when joint)."""

    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID  # fixed at training (a mapped one has its own)
    layout = None  # seqlab's own text layout: the text, then EOS (a mapped one has its family's)
    languages = False  # no language codes or task prefix (a mapped one has them)

    def __init__(self, src_model: bytes, tgt_model: bytes | None = None) -> None:
        self.src_model, self.tgt_model = src_model, tgt_model
        self.hf_files: dict[str, str] = {}  # seqlab's own has no family's config files
        self.src = spm.SentencePieceProcessor(model_proto=src_model)
        self.tgt = self.src if tgt_model is None else spm.SentencePieceProcessor(model_proto=tgt_model)
        for sp in (self.src, self.tgt):
            ids = (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id())
            if ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
                expected = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
                raise ConfigError(f"tokenizer special ids {ids} differ from seqlab's {expected}")

    @property
    def digest(self) -> str:
        """SHA-256 of the whole model(s): what token ids in a cache were made with."""
        h = hashlib.sha256(self.src_model)
        h.update(b"\0" + (self.tgt_model or b""))
        return h.hexdigest()

    @property
    def joint(self) -> bool:
        return self.tgt_model is None

    @property
    def src_vocab_size(self) -> int:
        return self.src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self.tgt.get_piece_size()

    def encode_source(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        """Token ids of each text followed by EOS; `threads` C++ threads share a batch."""
        return [ids + [EOS_ID] for ids in self.src.encode(list(texts), num_threads=threads)]

    def encode_target(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        """Token ids of each text followed by EOS (BOS is prepended by the batch collator)."""
        return [ids + [EOS_ID] for ids in self.tgt.encode(list(texts), num_threads=threads)]

    def decode_target(self, ids: Sequence[int]) -> str:
        """Detokenized text of target ids, stopping at the first EOS and dropping specials."""
        out: list[int] = []
        for i in ids:
            if i == EOS_ID:
                break
            if i not in (PAD_ID, BOS_ID):
                out.append(int(i))
        return self.tgt.decode(out)

    def decode_source(self, ids: Sequence[int]) -> str:
        return self.src.decode([int(i) for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID)])

    def normalize(self, text: str, side: Literal["src", "tgt"] = "tgt") -> str:
        """The text as the tokenizer sees it (NFKC, whitespace collapsed): what a round trip gives."""
        normalized = (self.src if side == "src" else self.tgt).normalize(text)
        return normalized.replace("\u2581", " ").strip(" ")  # SentencePiece marks spaces with U+2581

    def id_to_piece(self, i: int, side: Literal["src", "tgt"] = "tgt") -> str:
        return (self.src if side == "src" else self.tgt).id_to_piece(int(i))

    def with_settings(self, src_lang: str | None = None, tgt_lang: str | None = None,
                      task_prefix: str | None = None) -> Tokenizer:
        """This tokenizer: it has no language codes or task prefix to set (`languages` is False)."""
        if src_lang or tgt_lang or task_prefix:
            raise ConfigError("seqlab's own tokenizer has no language codes or task prefix")
        return self

    def vocabulary(self, side: Literal["src", "tgt"]) -> dict[str, int]:
        """piece -> id of one side, as `vocab.json` holds it."""
        processor = self.src if side == "src" else self.tgt
        return {processor.id_to_piece(i): i for i in range(processor.get_piece_size())}

    def write_hf(self, out: Path) -> None:
        """The family's config files as imported, then M2M100's `sentencepiece.bpe.model` (where its
        `vocab.json` came with them), or Marian's layout: `source.spm`, `target.spm`, `vocab.json` (+
        `target_vocab.json` for separate vocabularies) and, for seqlab's own, a MarianTokenizer config."""
        for name, text in self.hf_files.items():
            atomic_write_text(out / name, text)
        if "vocab.json" in self.hf_files:  # M2M100's layout: its vocab.json numbers the pieces
            atomic_write(out / "sentencepiece.bpe.model", lambda f: f.write(self.src_model))
            return
        src_model, tgt_model = self.src_model, self.tgt_model or self.src_model
        atomic_write(out / "source.spm", lambda f: f.write(src_model))
        atomic_write(out / "target.spm", lambda f: f.write(tgt_model))
        atomic_write_text(out / "vocab.json", json.dumps(self.vocabulary("src"), ensure_ascii=False))
        if not self.joint:
            atomic_write_text(out / "target_vocab.json", json.dumps(self.vocabulary("tgt"), ensure_ascii=False))
        if not self.hf_files:
            config = {"tokenizer_class": "MarianTokenizer", "unk_token": "<unk>", "eos_token": "</s>",
                      "pad_token": "<pad>", "separate_vocabs": not self.joint}
            atomic_write_text(out / "tokenizer_config.json", json.dumps(config, indent=1))

    def to_dict(self) -> dict[str, Any]:
        return {"src_model": self.src_model, "tgt_model": self.tgt_model}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> Tokenizer:
        return cls(state["src_model"], state.get("tgt_model"))

    def to_checkpoint(self) -> dict[str, Any]:
        """What a checkpoint stores: the model bytes as hex (plain containers only: weights_only loading)."""
        return {"src_model": self.src_model.hex(), "tgt_model": self.tgt_model.hex() if self.tgt_model else None}

    @classmethod
    def from_checkpoint(cls, state: dict[str, Any]) -> Tokenizer:
        """The tokenizer `to_checkpoint` stored (data.mapped.from_checkpoint reads either kind)."""
        return cls(*models_from_checkpoint(state))

    @classmethod
    def train(cls, sources: Sequence[str], targets: Sequence[str], cfg: TokenizerConfig) -> Tokenizer:
        """Train on the given texts: one model on both sides, or one per side."""
        if cfg.joint:
            return cls(_train_model(list(sources) + list(targets), cfg))
        return cls(_train_model(sources, cfg), _train_model(targets, cfg))

    @classmethod
    def cached(cls, cache_dir: Path, key_data: dict[str, Any], sources: Any, targets: Any,
               cfg: TokenizerConfig) -> Tokenizer:
        """Load the tokenizer for `key_data` from `cache_dir`, training and saving it once.

        `sources`/`targets` are callables returning the training texts, so a cache hit
        never reads the corpus.
        """
        key = cache_key({"tokenizer": asdict(cfg), "corpus": key_data, "sampling": SAMPLING_VERSION})
        path = cache_dir / f"tokenizer-{key}.json"
        if not path.exists():
            log.info("training a %s tokenizer (vocab %d) -> %s", cfg.model_type, cfg.vocab_size, path)
            tok = cls.train(sources(), targets(), cfg)
            state = {"src": tok.src_model.hex(), "tgt": tok.tgt_model.hex() if tok.tgt_model else None}
            if publish_once(path, json.dumps(state).encode()):
                return tok
            log.info("another process published %s first; using that one", path)
        state = json.loads(path.read_text())
        return cls(bytes.fromhex(state["src"]), bytes.fromhex(state["tgt"]) if state["tgt"] else None)


def models_from_checkpoint(state: dict[str, Any]) -> tuple[bytes, bytes | None]:
    """The SentencePiece model bytes a checkpoint's tokenizer record holds (hex in the file)."""
    return bytes.fromhex(state["src_model"]), bytes.fromhex(state["tgt_model"]) if state.get("tgt_model") else None


def training_sample(texts: Sequence[str], cfg: TokenizerConfig) -> list[str]:
    """At most `cfg.max_sentences` non-empty texts, chosen by `cfg.seed` alone, in corpus order.

    SentencePiece's own sampling (`input_sentence_size` with shuffling) gives a different
    sample, hence a different vocabulary, in every process even with its generator
    seeded; sampling here makes training a function of the texts and the config.
    """
    kept = [t for t in texts if t.strip()]
    if len(kept) <= cfg.max_sentences:
        return kept
    chosen = sorted(random.Random(cfg.seed).sample(range(len(kept)), cfg.max_sentences))
    return [kept[i] for i in chosen]


def _train_model(texts: Sequence[str], cfg: TokenizerConfig) -> bytes:
    buffer = io.BytesIO()
    spm.set_random_generator_seed(cfg.seed)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(training_sample(texts, cfg)),
        model_writer=buffer,
        vocab_size=cfg.vocab_size,
        model_type=cfg.model_type,
        character_coverage=cfg.character_coverage,
        byte_fallback=cfg.byte_fallback,
        normalization_rule_name=cfg.normalization,
        input_sentence_size=0,  # the sample is already drawn
        shuffle_input_sentence=False,
        seed_sentencepiece_size=1_000_000,
        pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
        max_sentence_length=1 << 16,
        hard_vocab_limit=False,  # small corpora get the vocabulary they can fill
        num_threads=2,
        minloglevel=2,
    )
    return buffer.getvalue()
