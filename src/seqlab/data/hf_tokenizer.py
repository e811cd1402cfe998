"""A pretrained family's tokenizer as transformers 5 runs it: the `tokenizers` library over the family's
`tokenizer.json` (BART's byte-level BPE; the SentencePiece models of T5, PEGASUS, mBART and NLLB as
transformers converts them, with each family's id layout: fairseq's offset, PEGASUS's 103, T5's sentinels,
the language codes), the special tokens placed by the family's TextLayout.

Stored whole in a seqlab checkpoint (the JSON text), so an imported model stays self-describing and
decoding it needs neither transformers nor the hub.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from seqlab.data.chat import ChatTemplate
from seqlab.data.layout import TextLayout, clean_up_tokenization
from seqlab.io import atomic_write_text

KIND = "tokenizers"  # the checkpoint record's `kind`


class JsonTokenizer:
    """Text <-> ids through a tokenizer.json, one vocabulary for both sides; `special` = (pad, unk, bos, eos),
    bos being the decoder start (`bos_id`: the layout's, where the target language's code is the start)."""

    joint = True
    languages = True

    def __init__(self, tokenizer_json: str, layout: TextLayout, special: tuple[int, int, int, int]) -> None:
        from tokenizers import Tokenizer as Backend

        self.tokenizer_json, self.layout = tokenizer_json, layout
        self.backend = Backend.from_str(tokenizer_json)
        self.special = tuple(int(i) for i in special)
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = self.special
        if layout.decoder_start is not None:
            self.bos_id = layout.decoder_start
        self.skipped = set(layout.skipped)
        self.hf_files: dict[str, str] = {}  # the family's tokenizer config files, for `seqlab export` (not used here)
        self.chat: ChatTemplate | None = None  # an instruct model's chat template (data.chat)

    def with_settings(self, src_lang: str | None = None, tgt_lang: str | None = None,
                      task_prefix: str | None = None) -> JsonTokenizer:
        out = JsonTokenizer(self.tokenizer_json, self.layout.with_settings(src_lang, tgt_lang, task_prefix),
                            self.special)
        out.hf_files, out.chat = self.hf_files, self.chat
        return out

    def write_hf(self, out: Path) -> None:
        """The family's config files and its tokenizer.json, as they came."""
        for name, text in self.hf_files.items():
            atomic_write_text(out / name, text)
        atomic_write_text(out / "tokenizer.json", self.tokenizer_json)

    @property
    def digest(self) -> str:
        h = hashlib.sha256(self.tokenizer_json.encode())
        h.update(json.dumps([self.layout.to_dict(), self.special], sort_keys=True).encode())
        return h.hexdigest()

    @property
    def src_vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    tgt_vocab_size = src_vocab_size

    def _encode(self, texts: Sequence[str], side: str, prefix: str = "") -> list[list[int]]:
        encodings = self.backend.encode_batch([prefix + t for t in texts], add_special_tokens=False)
        return [self.layout.wrap(e.ids, side) for e in encodings]

    def encode_source(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        return self._encode(texts, "source", self.layout.task_prefix)

    def encode_text(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's own tokens, no special token added (a rendered chat template already holds its own)."""
        return [list(e.ids) for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def encode_continuation(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids a causal LM generates for each text after its prompt: the text's own tokens, no special
        token before them (Llama's `<s>` opens a prompt, never a continuation), the end token after them."""
        return [[*ids, self.eos_id] for ids in self.encode_text(texts)]

    def encode_target(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        return self._encode(texts, "target")

    def decode_target(self, ids: Sequence[int]) -> str:
        """What batch_decode(skip_special_tokens=True) gives for the generated ids, up to the first EOS."""
        ids = [int(i) for i in ids]
        return self.decode_source(ids[: ids.index(self.eos_id)] if self.eos_id in ids else ids)

    def decode_source(self, ids: Sequence[int]) -> str:
        """batch_decode(skip_special_tokens=True) of these ids: every special id dropped."""
        text = self.backend.decode([int(i) for i in ids if int(i) not in self.skipped], skip_special_tokens=True)
        return clean_up_tokenization(text) if self.layout.clean_up_spaces else text

    def id_to_piece(self, i: int, side: Literal["src", "tgt"] = "tgt") -> str:
        return self.backend.id_to_token(int(i)) or "<unk>"

    def to_checkpoint(self) -> dict[str, Any]:
        return {"kind": KIND, "tokenizer_json": self.tokenizer_json, "layout": self.layout.to_dict(),
                "special": list(self.special), "hf_files": dict(self.hf_files),
                "chat": self.chat.to_dict() if self.chat is not None else None}

    @classmethod
    def from_checkpoint(cls, state: dict[str, Any]) -> JsonTokenizer:
        out = cls(state["tokenizer_json"], TextLayout.from_dict(state["layout"]), tuple(state["special"]))
        out.hf_files = dict(state.get("hf_files") or {})
        out.chat = ChatTemplate.from_dict(state.get("chat"))
        return out
