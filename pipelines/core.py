"""The reported experiments' shared stages: a reference model trained, then decoded; paired tests against a
baseline decoding. What a pipeline is lives in seqlab.pipeline.core."""

from __future__ import annotations

from seqlab.pipeline.core import EVAL_COMMON, Stage

REFERENCE_UPDATES = {"mt_bible_small": 3155, "sum_debian_small": 1194}  # what 25 quiet minutes held


def trained_then_decoded(experiment: str, decodings: dict[str, tuple[str, ...]], train_name: str = "train"
                         ) -> tuple[Stage, ...]:
    """A reference model's stages: its training to its fixed number of bf16 updates, then one test-split
    decoding per name (`decodings`: name -> decoding overrides), each pinned to the reported setting
    (fp32, seqlab's engine). Every experiment on a reference model shares this training stage."""
    updates = REFERENCE_UPDATES[experiment]
    train = Stage(train_name, "train", (f"experiment={experiment}", f"trainer.max_steps={updates}",
                                        "trainer.max_time=null", "trainer.precision=bf16-mixed",
                                        "train.quick_eval_size=0", "logger=csv"))
    return (train, *(Stage(name, "evaluate", (*overrides, *EVAL_COMMON), after=train_name)
                     for name, overrides in decodings.items()))


def compared(name: str, base: str, others: tuple[str, ...]) -> Stage:
    """Paired tests (seqlab compare) of evaluations against a baseline evaluation."""
    return Stage(name, "compare", compares=(base, *others))
