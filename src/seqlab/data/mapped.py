"""A tokenizer whose ids come from a vocabulary list rather than from SentencePiece: Marian (OPUS-MT) and
M2M100.

These models segment with SentencePiece (Marian's `source.spm`, `target.spm`; M2M100's
`sentencepiece.bpe.model`) but number the pieces with their own `vocab.json`, and their special ids differ
from seqlab's (e.g. eos 0, pad 58100). This is MarianTokenizer's and M2M100Tokenizer's rule: pieces from
SentencePiece, ids from the vocabulary (unknown pieces -> unk), the special tokens placed by the family's
TextLayout (EOS appended; M2M100's language code first); decoding drops the special ids as
batch_decode(skip_special_tokens=True) does, maps the rest back to pieces and lets SentencePiece join them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Literal

import sentencepiece as spm

from seqlab.data.hf_tokenizer import KIND as JSON_KIND
from seqlab.data.hf_tokenizer import JsonTokenizer
from seqlab.data.layout import TEXT, TextLayout
from seqlab.data.protocol import TextTokenizer
from seqlab.data.tokenizer import Tokenizer, models_from_checkpoint


def appended_eos(special: Sequence[int]) -> TextLayout:
    """Marian's layout: EOS after the text on both sides; every special id dropped when decoding."""
    eos = int(special[3])
    return TextLayout((TEXT, eos), (TEXT, eos), skipped=tuple(sorted({int(i) for i in special})))


class MappedTokenizer(Tokenizer):
    """SentencePiece segmentation with ids from a vocabulary list; `special` = (pad, unk, bos, eos) ids."""

    languages = True

    def __init__(self, src_model: bytes, tgt_model: bytes | None, pieces: Sequence[str],
                 tgt_pieces: Sequence[str] | None, special: tuple[int, int, int, int],
                 layout: TextLayout | None = None) -> None:
        self.src_model, self.tgt_model = src_model, tgt_model
        self.src = spm.SentencePieceProcessor(model_proto=src_model)
        self.tgt = self.src if tgt_model is None else spm.SentencePieceProcessor(model_proto=tgt_model)
        self.pieces, self.tgt_pieces = list(pieces), list(tgt_pieces) if tgt_pieces is not None else None
        self.special = tuple(int(i) for i in special)
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = self.special
        self.layout = layout if layout is not None else appended_eos(self.special)
        if self.layout.decoder_start is not None:  # the target language's code starts the decoder (mBART-cc25)
            self.bos_id = self.layout.decoder_start
        self.src_ids = {p: i for i, p in enumerate(self.pieces)}
        self.tgt_ids = self.src_ids if self.tgt_pieces is None else {p: i for i, p in enumerate(self.tgt_pieces)}
        self.hf_files: dict[str, str] = {}  # the family's tokenizer config files, for `seqlab export`

    def with_settings(self, src_lang: str | None = None, tgt_lang: str | None = None,
                      task_prefix: str | None = None) -> MappedTokenizer:
        out = MappedTokenizer(self.src_model, self.tgt_model, self.pieces, self.tgt_pieces, self.special,
                              self.layout.with_settings(src_lang, tgt_lang, task_prefix))
        out.hf_files = self.hf_files
        return out
    @property
    def joint(self) -> bool:
        return self.tgt_pieces is None

    @property
    def digest(self) -> str:
        h = hashlib.sha256(self.src_model + b"\0" + (self.tgt_model or b""))
        h.update(json.dumps([self.pieces, self.tgt_pieces, self.special, self.layout.to_dict()],
                            sort_keys=True).encode())
        return h.hexdigest()

    @property
    def src_vocab_size(self) -> int:
        return len(self.pieces)

    @property
    def tgt_vocab_size(self) -> int:
        return len(self.tgt_pieces if self.tgt_pieces is not None else self.pieces)

    def _encode(self, processor: Any, ids: dict[str, int], texts: Sequence[str], side: str) -> list[list[int]]:
        return [self.layout.wrap([ids.get(p, self.unk_id) for p in pieces], side)
                for pieces in processor.encode(list(texts), out_type=str)]

    def encode_source(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        prefix = self.layout.task_prefix
        return self._encode(self.src, self.src_ids, [prefix + t for t in texts], "source")

    def encode_target(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        return self._encode(self.tgt, self.tgt_ids, texts, "target")

    def id_to_piece(self, i: int, side: Literal["src", "tgt"] = "tgt") -> str:
        table = self.pieces if side == "src" or self.tgt_pieces is None else self.tgt_pieces
        return table[int(i)] if 0 <= int(i) < len(table) else "<unk>"

    def vocabulary(self, side: Literal["src", "tgt"]) -> dict[str, int]:
        """The family's own numbering (its vocab.json)."""
        table = self.pieces if side == "src" or self.tgt_pieces is None else self.tgt_pieces
        return {p: i for i, p in enumerate(table)}

    def _decode(self, ids: Sequence[int], side: Literal["src", "tgt"]) -> str:
        out, skipped = [], set(self.layout.skipped)
        for i in ids:
            if int(i) == self.eos_id:
                break
            if int(i) not in skipped:
                out.append(self.id_to_piece(int(i), side))
        return (self.src if side == "src" else self.tgt).decode_pieces(out)

    def decode_target(self, ids: Sequence[int]) -> str:
        return self._decode(ids, "tgt")

    def decode_source(self, ids: Sequence[int]) -> str:
        return self._decode(ids, "src")

    def to_checkpoint(self) -> dict[str, Any]:
        return {**super().to_checkpoint(), "pieces": self.pieces, "tgt_pieces": self.tgt_pieces,
                "special": list(self.special), "layout": self.layout.to_dict(), "hf_files": dict(self.hf_files)}


AnyTokenizer = TextTokenizer  # seqlab's own, a mapped one (a Tokenizer), or an imported family's, by one protocol


def from_checkpoint(state: dict[str, Any]) -> AnyTokenizer:
    """Any kind of tokenizer from a checkpoint's record: an imported family's tokenizer.json, a mapped one
    where it carries its own piece numbering (Marian, M2M100), else seqlab's own."""
    if state.get("kind") == JSON_KIND:
        return JsonTokenizer.from_checkpoint(state)
    if "pieces" not in state:
        return Tokenizer.from_checkpoint(state)
    layout = TextLayout.from_dict(state["layout"]) if state.get("layout") else None
    out = MappedTokenizer(*models_from_checkpoint(state), state["pieces"], state.get("tgt_pieces"),
                          tuple(state["special"]), layout)
    out.hf_files = dict(state.get("hf_files") or {})
    return out
