"""The reference translation model: mt_bible_small (Spanish -> English Bible) to its 3,155 bf16 updates,
decoded on the test split with greedy search and beam 5."""

from __future__ import annotations

from pipelines.core import trained_then_decoded
from pipelines.tables import decodings_table
from seqlab.pipeline.core import Pipeline, Table

PIPELINE = Pipeline(
    "mt_bible_small", "the reference translation model, greedy and beam 5 on the test split",
    trained_then_decoded("mt_bible_small", {"greedy": ("decoding=greedy",), "beam5": ("decoding=beam",)}),
    (Table("mt_bible_small", decodings_table(("bleu", "chrf")), "docs/experiments/reference_models.md"),),
)
