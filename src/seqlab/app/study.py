"""`seqlab study [QUESTION ...] [--recipe short|trained] [--seeds 3]` (`make study`): the architecture study;
`seqlab study --grid` (`seqlab sweep-arch`, `make sweep-arch`): the norm x positions x tying grid at a short
budget.

The study is a pipeline (seqlab.analysis.study_stages) run by the runner every experiment uses
(seqlab.app.runner): each training and each decoding a stage with a digest, archived the moment it lands,
skipped when the archive holds it, a training cut off resumed from its checkpoint. A recipe is a training
budget with its own experiment file and archive (seqlab.analysis.study RECIPES): `short` (300 updates,
results/arch_study) and `trained` (mt_bible_small's recipe to the budget its baseline's validation curve
chose, results/arch_study_trained; `python -m pipelines arch_study_trained` runs the whole of it). A failed
run is reported and the others go on; the exit status says whether any failed. Then the asked questions'
tables and claims as the docs render them (each question's own table function,
seqlab.analysis.study_questions), the validation curves the docs show (into the archive), and the study's
dashboard (seqlab.analysis.study_report, the page `seqlab report` draws) in outputs/<archive>/, or the grid's
in its folder.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from seqlab.analysis.study import RECIPES, SEEDS, Archived, Recipe
from seqlab.analysis.study_questions import QUESTIONS, STUDY, claims_table
from seqlab.analysis.study_report import write_study_report
from seqlab.analysis.study_stages import grid_pipeline, study_pipeline
from seqlab.analysis.study_tables import draw_curves
from seqlab.app import cli
from seqlab.app.runner import PipelineError, execute
from seqlab.hardware import auto_precision
from seqlab.pipeline.commands import Command, seqlab
from seqlab.pipeline.core import Pipeline


def main(argv: list[str] | None = None, command: Command = seqlab) -> int:
    parser = cli.parser("study", __doc__)
    parser.add_argument("questions", nargs="*", default=["all"],
                        help=f"which questions: {', '.join(QUESTIONS)}, or all ({', '.join(STUDY)}; the default)")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="short",
                        help="the training budget: short (300 updates) or trained (see conf/experiment/)")
    parser.add_argument("--seeds", type=int, default=None,
                        help=f"training seeds per variant (default {SEEDS}; grid: 1)")
    parser.add_argument("--archive", type=Path, default=None, help="the archive (default: the recipe's, results/)")
    parser.add_argument("--commit", action="store_true", help="git-commit each archive record as it lands")
    parser.add_argument("--dry-run", action="store_true", help="print the stages that would run, run nothing")
    parser.add_argument("--from-archive", action="store_true", help="only rebuild the tables from the archive")
    parser.add_argument("--train-args", default="", help="extra seqlab train overrides, one string")
    parser.add_argument("--eval-args", default="", help="extra seqlab evaluate overrides, one string")
    grid = parser.add_argument_group("the grid")
    grid.add_argument("--grid", action="store_true", help="train and evaluate the GRID instead of the questions")
    grid.add_argument("--experiment", default="mt_bible_small")
    grid.add_argument("--updates", type=int, default=300, help="trainer.max_steps per run")
    grid.add_argument("--precision", default="auto", help="trainer.precision (auto: chosen once, for every run)")
    grid.add_argument("--limit", type=int, default=300, help="test sentences per evaluation")
    return cli.run("study", parser, argv, lambda args: body(args, parser, command))


def body(args: argparse.Namespace, parser: argparse.ArgumentParser, command: Command = seqlab) -> int:
    train_args, eval_args = tuple(shlex.split(args.train_args)), tuple(shlex.split(args.eval_args))
    if args.grid:
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        folder = args.archive or Path("outputs/sweep_arch") / stamp
        precision = auto_precision("cpu")[0] if args.precision == "auto" else args.precision
        pipeline = grid_pipeline(folder, args.seeds or 1, args.experiment, args.updates, precision, args.limit,
                                 f"sweep_arch-{stamp}", train_args, eval_args)
        failed = run(pipeline, args, command)
        if not args.dry_run:
            page = write_study_report(folder, ["beam5", "greedy"], folder / "report.html",
                                      f"seqlab sweep-arch: {folder}")
            print(f"the grid's dashboard: {page}", file=sys.stderr)
        return report_failures("sweep-arch", failed)
    recipe = RECIPES[args.recipe]
    questions = list(STUDY) if "all" in args.questions else args.questions
    unknown = [q for q in questions if q not in QUESTIONS]
    if unknown:
        parser.error(f"unknown question(s) {unknown}; use {', '.join(QUESTIONS)} or all")
    wrong = [q for q in questions if recipe.name not in QUESTIONS[q].recipes]
    if wrong:
        parser.error(f"question(s) {wrong} belong to --recipe {QUESTIONS[wrong[0]].recipes[0]}")
    archive = args.archive or recipe.archive
    failed = []
    if not args.from_archive:
        pipeline = study_pipeline(archive.name, f"{', '.join(questions)} at the {recipe.name} recipe", questions,
                                  recipe, seeds=args.seeds or SEEDS, archive=archive, train_args=train_args,
                                  eval_args=eval_args)
        failed = run(pipeline, args, command)
    if args.dry_run:
        return report_failures("arch study", failed)
    try:
        print(tables(archive, recipe, questions))
        page = write_study_report(archive, list(recipe.decodings), Path("outputs") / archive.name / "report.html",
                                  f"seqlab study: {archive}")
        if page is not None:
            print(f"the study's dashboard: {page}", file=sys.stderr)
    except Exception as err:  # noqa: BLE001  the records are kept; only the summary failed
        failed.append(f"summary ({type(err).__name__}: {err})")
    return report_failures("arch study", failed)


def run(pipeline: Pipeline, args: argparse.Namespace, command: Command) -> list[str]:
    """The pipeline's stages its archive lacks; what failed (a stage that cannot run anywhere, named)."""
    try:
        return execute(pipeline, command, dry_run=args.dry_run, commit=args.commit)
    except PipelineError as err:
        return [str(err)]


def tables(archive: Path, recipe: Recipe, questions: list[str]) -> str:
    """Each asked question's table with archived runs (the recipe's reported decoding) and the claims they
    test, as the docs render them; the recipe's validation curves are redrawn into the archive."""
    reported = next(iter(recipe.decodings))
    archived = Archived.load(archive, reported)
    covered = {q: question for q, question in QUESTIONS.items() if recipe.name in question.recipes}
    draw_curves(archive, covered, reported, archived.training)
    judged = {q: QUESTIONS[q] for q in questions
              if any(k in (archived.decoded if QUESTIONS[q].compared_on_test else archived.training)
                     for k in QUESTIONS[q].runs())}
    numbers = {q: question.numbers(archived) for q, question in judged.items()}
    claims = claims_table({q: data for q, (_, data) in numbers.items()})
    return "\n\n".join([*(text for text, _ in numbers.values()), *([claims] if claims else [])])


def report_failures(what: str, failed: list[str]) -> int:
    if failed:
        print(f"{what}: {len(failed)} failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"{what}: every run finished", file=sys.stderr)
    return 0
