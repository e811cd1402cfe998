"""The one tokenizer boundary: what decoding, evaluation, export and the engines read of a tokenizer, whichever
of the three kinds it is: seqlab's own SentencePiece pair (data.tokenizer), an imported SentencePiece model
numbered by its family's vocabulary (data.mapped: Marian, M2M100) and an imported `tokenizer.json`
(data.hf_tokenizer). Code outside `seqlab.data` reads tokenizers through this protocol, never by class."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from seqlab.constants import HasSpecialIds
from seqlab.data.layout import TextLayout

Side = Literal["src", "tgt"]


class TextTokenizer(HasSpecialIds, Protocol):
    """Its pad, decoder start (an imported family's target language code where that starts it) and end ids are
    HasSpecialIds'; `unk_id` besides."""

    unk_id: int
    layout: TextLayout | None  # an imported family's special tokens and language codes; None: seqlab's own
    hf_files: dict[str, str]  # the family's tokenizer config files as imported, written back on export
    languages: bool  # whether `with_settings` takes language codes and a task prefix (an imported family's)

    @property
    def digest(self) -> str: ...

    @property
    def joint(self) -> bool: ...

    @property
    def src_vocab_size(self) -> int: ...

    @property
    def tgt_vocab_size(self) -> int: ...

    def encode_source(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]: ...

    def encode_target(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]: ...

    def decode_source(self, ids: Sequence[int]) -> str: ...

    def decode_target(self, ids: Sequence[int]) -> str: ...

    def id_to_piece(self, i: int, side: Side = "tgt") -> str: ...

    def with_settings(self, src_lang: str | None = None, tgt_lang: str | None = None,
                      task_prefix: str | None = None) -> TextTokenizer: ...

    def to_checkpoint(self) -> dict[str, Any]: ...

    def write_hf(self, out: Path) -> None:
        """Its files in the layout Hugging Face's `AutoTokenizer.from_pretrained(out)` reads."""
        ...
