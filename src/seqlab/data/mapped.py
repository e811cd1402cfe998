"""A tokenizer whose ids come from a vocabulary list rather than from SentencePiece: Marian (OPUS-MT).

Marian models segment with SentencePiece (`source.spm`, `target.spm`) but number the pieces with
their own `vocab.json`, and their special ids differ from seqlab's (e.g. eos 0, pad 58100). This is
MarianTokenizer's rule: pieces from SentencePiece, ids from the vocabulary (unknown pieces -> unk),
EOS appended; decoding maps ids back to pieces and lets SentencePiece join them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Literal

import sentencepiece as spm

from seqlab.data.tokenizer import Tokenizer, models_from_checkpoint


class MappedTokenizer(Tokenizer):
    """SentencePiece segmentation with ids from a vocabulary list; `special` = (pad, unk, bos, eos) ids."""

    def __init__(self, src_model: bytes, tgt_model: bytes | None, pieces: Sequence[str],
                 tgt_pieces: Sequence[str] | None, special: tuple[int, int, int, int]) -> None:
        self.src_model, self.tgt_model = src_model, tgt_model
        self.src = spm.SentencePieceProcessor(model_proto=src_model)
        self.tgt = self.src if tgt_model is None else spm.SentencePieceProcessor(model_proto=tgt_model)
        self.pieces, self.tgt_pieces = list(pieces), list(tgt_pieces) if tgt_pieces is not None else None
        self.special = tuple(int(i) for i in special)
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = self.special
        self.src_ids = {p: i for i, p in enumerate(self.pieces)}
        self.tgt_ids = self.src_ids if self.tgt_pieces is None else {p: i for i, p in enumerate(self.tgt_pieces)}

    @property
    def joint(self) -> bool:
        return self.tgt_pieces is None

    @property
    def digest(self) -> str:
        h = hashlib.sha256(self.src_model + b"\0" + (self.tgt_model or b""))
        h.update(json.dumps([self.pieces, self.tgt_pieces, self.special]).encode())
        return h.hexdigest()

    @property
    def src_vocab_size(self) -> int:
        return len(self.pieces)

    @property
    def tgt_vocab_size(self) -> int:
        return len(self.tgt_pieces if self.tgt_pieces is not None else self.pieces)

    def _encode(self, processor: Any, ids: dict[str, int], texts: Sequence[str]) -> list[list[int]]:
        return [[ids.get(p, self.unk_id) for p in pieces] + [self.eos_id]
                for pieces in processor.encode(list(texts), out_type=str)]

    def encode_source(self, texts: Sequence[str]) -> list[list[int]]:
        return self._encode(self.src, self.src_ids, texts)

    def encode_target(self, texts: Sequence[str]) -> list[list[int]]:
        return self._encode(self.tgt, self.tgt_ids, texts)

    def id_to_piece(self, i: int, side: Literal["src", "tgt"] = "tgt") -> str:
        table = self.pieces if side == "src" or self.tgt_pieces is None else self.tgt_pieces
        return table[int(i)] if 0 <= int(i) < len(table) else "<unk>"

    def _decode(self, ids: Sequence[int], side: Literal["src", "tgt"]) -> str:
        out = []
        for i in ids:
            if int(i) == self.eos_id:
                break
            if int(i) not in (self.pad_id, self.bos_id):
                out.append(self.id_to_piece(int(i), side))
        return (self.src if side == "src" else self.tgt).decode_pieces(out)

    def decode_target(self, ids: Sequence[int]) -> str:
        return self._decode(ids, "tgt")

    def decode_source(self, ids: Sequence[int]) -> str:
        return self._decode(ids, "src")

    def to_checkpoint(self) -> dict[str, Any]:
        return {**super().to_checkpoint(), "pieces": self.pieces, "tgt_pieces": self.tgt_pieces,
                "special": list(self.special)}


def from_checkpoint(state: dict[str, Any]) -> Tokenizer:
    """Either kind of tokenizer from a checkpoint's record: a mapped one where it carries its own piece
    numbering (an imported model), else seqlab's own."""
    if "pieces" not in state:
        return Tokenizer.from_checkpoint(state)
    return MappedTokenizer(*models_from_checkpoint(state), state["pieces"], state.get("tgt_pieces"),
                           tuple(state["special"]))
