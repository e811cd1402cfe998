"""The reference summarization model: sum_debian_small (Debian description -> synopsis; pre-LN, copy
attention) to its 1,194 updates, decoded with greedy search, beam 5, and beam 5 without repeated 3-grams."""

from __future__ import annotations

from pipelines.core import trained_then_decoded
from pipelines.tables import decodings_table
from seqlab.pipeline.core import Pipeline, Table

PIPELINE = Pipeline(
    "sum_debian_small", "the reference summarization model, with and without no-repeat 3-grams",
    trained_then_decoded("sum_debian_small", {
        "greedy": ("decoding=greedy",), "beam5": ("decoding=beam",),
        "beam5_no_repeat3": ("decoding=beam", "decoding.no_repeat_ngram_size=3")}),
    (Table("sum_debian_small", decodings_table(("rouge1", "rouge2", "rougeL")),
           "docs/experiments/reference_models.md"),),
)
