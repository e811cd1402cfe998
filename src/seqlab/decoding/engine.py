"""What every decoding engine is: something that decodes a `DecodeBatch` for a model into `generate`'s output.

seqlab's own search (`SearchEngine`, in a precision), the same search on another form of the model
(engines.choice: int8 or oneDNN-packed linear layers, a CUDA-graph step) and CTranslate2's (engines.ct2) serve
`DecodingEngine`; evaluation, translation and distillation call `decode` and never ask which engine it is.
`generate` is `decode` with `seqlab.decoding.generate`'s arguments, written once here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from torch import Tensor

from seqlab.decoding.config import DecodingConfig
from seqlab.decoding.generate import generate, precision_context
from seqlab.decoding.search import GenerateOutput
from seqlab.decoding.speculative import SpeculativeStats
from seqlab.model import Model


@dataclass(frozen=True)
class DecodeBatch:
    """One padded batch of sources and what is asked of it."""

    src_ids: Tensor  # (B, S)
    src_pad_mask: Tensor  # (B, S) True at padding
    cfg: DecodingConfig
    target_prefix: Sequence[Sequence[int]] | None = None  # each source's forced target prefix (no EOS)
    constraints: Sequence[Sequence[Sequence[int]]] | None = None  # each source's lexical constraints
    draft_model: Model | None = None  # decoding.draft=ckpt:PATH's model
    stats: SpeculativeStats | None = None  # what speculative decoding adds its counts to


class DecodingEngine(Protocol):
    """Decodes a batch for `model` (the checkpoint's seqlab model: CTranslate2 scores its tokens with it)."""

    def decode(self, model: Model, batch: DecodeBatch) -> GenerateOutput: ...


class BaseEngine:
    """An engine's `generate`: `decode` called as `seqlab.decoding.generate` is."""

    def decode(self, model: Model, batch: DecodeBatch) -> GenerateOutput:
        raise NotImplementedError

    def generate(self, model: Model, src_ids: Tensor, src_pad_mask: Tensor, cfg: DecodingConfig,
                 target_prefix: Sequence[Sequence[int]] | None = None,
                 constraints: Sequence[Sequence[Sequence[int]]] | None = None,
                 draft_model: Model | None = None, stats: SpeculativeStats | None = None) -> GenerateOutput:
        return self.decode(model, DecodeBatch(src_ids, src_pad_mask, cfg, target_prefix, constraints, draft_model,
                                              stats))


def search(model: Model, batch: DecodeBatch, **given: object) -> GenerateOutput:
    """seqlab's search over `batch` (`given`: generate's further arguments, a captured step)."""
    return generate(model, batch.src_ids, batch.src_pad_mask, batch.cfg, target_prefix=batch.target_prefix,
                    constraints=batch.constraints, draft_model=batch.draft_model, stats=batch.stats, **given)


class SearchEngine(BaseEngine):
    """seqlab's own search on the model as it is, in fp32 or under bf16 autocast (`precision_context`)."""

    def __init__(self, precision: str = "fp32") -> None:
        self.precision = precision

    def decode(self, model: Model, batch: DecodeBatch) -> GenerateOutput:
        with precision_context(self.precision, batch.src_ids.device):
            return search(model, batch)
