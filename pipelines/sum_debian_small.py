"""The reference summarization model: sum_debian_small (Debian description -> synopsis; pre-LN, copy
attention) to its 1,194 updates, decoded with greedy search, beam 5, and beam 5 without repeated 3-grams."""

from __future__ import annotations

from pipelines.core import Pipeline, Stage, Table
from pipelines.tables import decodings_table

TRAIN = ("experiment=sum_debian_small", "trainer.max_steps=1194", "trainer.max_time=null",
         "trainer.precision=bf16-mixed", "train.quick_eval_size=0", "logger=csv")
EVAL = ("split=test", "precision=fp32", "engine=seqlab", "logger=csv")

PIPELINE = Pipeline(
    "sum_debian_small", "the reference summarization model, with and without no-repeat 3-grams",
    (Stage("train", "train", TRAIN),
     Stage("greedy", "evaluate", ("decoding=greedy", *EVAL), after="train"),
     Stage("beam5", "evaluate", ("decoding=beam", *EVAL), after="train"),
     Stage("beam5_no_repeat3", "evaluate", ("decoding=beam", "decoding.no_repeat_ngram_size=3", *EVAL),
           after="train")),
    (Table("sum_debian_small", decodings_table(("rouge1", "rouge2", "rougeL")),
           "docs/experiments/reference_models.md"),),
)
