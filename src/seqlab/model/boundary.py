"""The model boundary: what the searches, scoring, engines and inspection may ask of a model, and nothing
else. The encoder-decoder (`Seq2SeqTransformer`), the one-stack models (`CausalTransformer`) and an ensemble of
either (`seqlab.decoding.ensemble.Ensemble`) serve it; the architecture reaches the code around them only as
the layout they declare (`seqlab.model.layout.RowLayout`: how a row starts, what its positions count, which
export class carries it).

`memory` is what `encode` returns and `start_cache` reads: an encoder's states, a one-stack model's prompt, an
ensemble's list of its members'; a cache is what `start_cache` returns and `decode` extends (a
`DecoderCache`, an ensemble's one per member), moved by the searches through its compact/expand/collapse
methods. Neither is read by the code around the model.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from torch import Tensor, nn

from seqlab.model.config import ModelConfig
from seqlab.model.layout import RowLayout


@runtime_checkable
class DecodingModel(Protocol):
    """A model as decoding sees it (see the module docstring)."""

    cfg: ModelConfig

    @property
    def layout(self) -> RowLayout:
        """How the model reads a row: `cfg.layout`."""
        ...

    def encode(self, src_ids: Tensor, src_pad_mask: Tensor) -> Any:
        """The memory of the sources (B, S) (pad mask True at padding)."""
        ...

    def start_cache(self, memory: Any, src_pad_mask: Tensor, group: int = 1, capacity: int = 64,
                    src_ids: Tensor | None = None) -> Any:
        """A cache over `memory` with `group` rows per source and room for `capacity` new tokens."""
        ...

    def decode(self, tgt_ids: Tensor, memory: Any, src_pad_mask: Tensor | None, cache: Any = None,
               src_ids: Tensor | None = None, states: list[Tensor] | None = None) -> tuple[Tensor, Any]:
        """(B, T, V) the scores of the decoder inputs `tgt_ids` after those in `cache` (extended in place)."""
        ...

    def forward(self, src_ids: Tensor, src_pad_mask: Tensor, tgt_in_ids: Tensor) -> Tensor:
        """(B, T, V) teacher-forced scores of the decoder inputs (B, T)."""
        ...

    def step_at_blocker(self) -> str | None:
        """Why the model cannot decode with one captured step (`engines.graphs`), or None."""
        ...

    def attention_modules(self) -> list[tuple[nn.Module, str]]:
        """The attention modules whose weights show how the model read a row, each with its kind (encoder,
        decoder_self, cross); none where no one map does (an ensemble: one per member)."""
        ...
