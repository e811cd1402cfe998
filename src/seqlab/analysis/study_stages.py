"""The architecture study as a pipeline: each (variant, seed) a training stage, each of its decodings an
evaluation stage, run by the one runner (seqlab.app.runner) like every other experiment.

Stage names are the archive's record names: `<variant>-seed<N>` (the training: its validation curve,
parameters, model and provenance) and `<variant>-seed<N>.<label>` (a test-split decoding: its metrics and
hypotheses). Seeds run outermost, so a stopped study leaves complete seeds behind; a variant shared by two
questions (the baseline) is one stage, so it trains once. A question judged on its training alone is not
decoded, and its trainings may diverge: a non-finite loss is its result, archived, not a failure.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from seqlab.analysis.study import GRID, SEEDS, VARIANTS, Recipe
from seqlab.analysis.study_questions import QUESTIONS
from seqlab.checkpoint import LAST
from seqlab.pipeline.core import EVAL_COMMON, Pipeline, Stage


def run_name(variant: str, seed: int) -> str:
    """A training stage's name: its records' names in the archive."""
    return f"{variant}-seed{seed}"


def study_stages(questions: list[str], recipe: Recipe, seeds: int = SEEDS, train_args: tuple[str, ...] = (),
                 eval_args: tuple[str, ...] = ()) -> tuple[Stage, ...]:
    """Each question's variants (each once), seeds outermost (no more than a question asks for its variant),
    each training followed by the recipe's decodings of its last checkpoint (the model after exactly the
    recipe's updates, not the best on validation, which would make the number of updates differ between
    runs), unless a question asked judges the variant on its training alone."""
    variants = list(dict.fromkeys(v for q in questions for v in QUESTIONS[q].variants))
    undecoded = {v for q in questions if not QUESTIONS[q].decoded for v in QUESTIONS[q].variants}
    most = {v: min([seeds] + [QUESTIONS[q].seeds for q in questions if v in QUESTIONS[q].variants
                              and QUESTIONS[q].seeds is not None]) for v in variants}
    stages: list[Stage] = []
    for seed in range(seeds):
        for variant in (v for v in variants if seed < most[v]):
            name = run_name(variant, seed)
            stages.append(Stage(name, "train", (f"experiment={recipe.experiment}", f"seed={seed}",
                                                f"run_name=arch_{variant}", *VARIANTS[variant], *train_args),
                                diverges=variant in undecoded))
            if variant not in undecoded:
                stages += [Stage(f"{name}.{label}", "evaluate", (f"decoding={preset}", *EVAL_COMMON, *eval_args),
                                 after=name, checkpoint=LAST) for label, preset in recipe.decodings.items()]
    return tuple(stages)


def queued_stages(groups: list[list[str]], recipe: Recipe, seeds: int = SEEDS) -> tuple[Stage, ...]:
    """Groups of questions in turn, each group's stages seeds outermost (a group of questions is finished
    before the next starts), a stage an earlier group has (the baseline) not repeated."""
    stages: dict[str, Stage] = {}
    for group in groups:
        for stage in study_stages(group, recipe, seeds):
            stages.setdefault(stage.name, stage)
    return tuple(stages.values())


def study_pipeline(name: str, summary: str, questions: list[str], recipe: Recipe, seeds: int = SEEDS,
                   archive: Path | None = None, train_args: tuple[str, ...] = (),
                   eval_args: tuple[str, ...] = ()) -> Pipeline:
    """The questions' stages at `recipe`, archived in `archive` (default results/<name>)."""
    return Pipeline(name, summary, study_stages(questions, recipe, seeds, train_args, eval_args), folder=archive)


def grid_pipeline(folder: Path, seeds: int, experiment: str, updates: int, precision: str, limit: int,
                  group: str, train_args: tuple[str, ...] = (), eval_args: tuple[str, ...] = ()) -> Pipeline:
    """Every combination of GRID (`seqlab sweep-arch`), `updates` updates each, greedy and beam 5 on the first
    `limit` test sentences, one W&B group; archived in `folder`, its stages run in `folder`/stages (a sweep,
    not a reported experiment: nothing of it is shared with the pipelines)."""
    stages: list[Stage] = []
    for seed, values in itertools.product(range(seeds), itertools.product(*GRID.values())):
        name = run_name("-".join(values), seed)
        stages.append(Stage(name, "train", (f"experiment={experiment}", *(f"{k}={v}" for k, v in zip(
            GRID, values, strict=True)), f"seed={seed}", f"trainer.max_steps={updates}", "trainer.max_time=null",
            f"trainer.precision={precision}", "train.quick_eval_size=0", f"logger.group={group}", *train_args)))
        stages += [Stage(f"{name}.{label}", "evaluate", (f"decoding={preset}", "split=test", f"limit={limit}",
                                                         "precision=fp32", "engine=seqlab", f"logger.group={group}",
                                                         *eval_args),
                         after=name) for label, preset in (("greedy", "greedy"), ("beam5", "beam"))]
    return Pipeline("sweep_arch", "norm x positions x tying", tuple(stages), folder=folder,
                    stage_root=folder / "stages")
