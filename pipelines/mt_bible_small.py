"""The reference translation model: mt_bible_small (Spanish -> English Bible) to its 3,155 bf16 updates,
decoded on the test split with greedy search and beam 5."""

from __future__ import annotations

from pipelines.core import Pipeline, Stage, Table
from pipelines.tables import decodings_table

TRAIN = ("experiment=mt_bible_small", "trainer.max_steps=3155", "trainer.max_time=null",
         "trainer.precision=bf16-mixed", "train.quick_eval_size=0", "logger=csv")
EVAL = ("split=test", "precision=fp32", "engine=seqlab", "logger=csv")

PIPELINE = Pipeline(
    "mt_bible_small", "the reference translation model, greedy and beam 5 on the test split",
    (Stage("train", "train", TRAIN),
     Stage("greedy", "evaluate", ("decoding=greedy", *EVAL), after="train"),
     Stage("beam5", "evaluate", ("decoding=beam", *EVAL), after="train")),
    (Table("mt_bible_small", decodings_table(("bleu", "chrf")), "docs/experiments/reference_models.md"),),
)
