"""`seqlab study [QUESTION ...] [--recipe short|trained] [--seeds 3]` (`make study`): the architecture study;
`seqlab study --grid` (`seqlab sweep-arch`, `make sweep-arch`): the norm x positions x tying grid at a short
budget.

A recipe is a training budget with its own experiment file, run folder and archive (seqlab.analysis.study
RECIPES): `short` (300 updates, results/arch_study) and `trained` (mt_bible_small's recipe to the budget
its baseline's validation curve chose, results/arch_study_trained). What is finished is read from the
archive, so a stopped study, on this machine or a fresh one, goes on where it stopped; `--commit` commits
each record as it lands. A failed run is reported and the others go on; the exit status says whether any
failed. Then the asked questions' tables and claims as the docs render them (each question's own table
function, seqlab.analysis.study_questions), the validation curves the docs show (into the archive), and the
study's dashboard (seqlab.analysis.study_report, the page `seqlab report` draws) in the run folder, or for the
grid the report.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from seqlab.analysis.study import RECIPES, SEEDS, Archived, Recipe
from seqlab.analysis.study_lengths import archive_source_lengths
from seqlab.analysis.study_questions import QUESTIONS, STUDY, claims_table
from seqlab.analysis.study_report import write_study_report
from seqlab.analysis.study_runs import execute, grid_runs, study_runs
from seqlab.analysis.study_tables import draw_curves
from seqlab.app import cli


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser("study", __doc__)
    parser.add_argument("questions", nargs="*", default=["all"],
                        help=f"which questions: {', '.join(QUESTIONS)}, or all ({', '.join(STUDY)}; the default)")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="short",
                        help="the training budget: short (300 updates) or trained (see conf/experiment/)")
    parser.add_argument("--seeds", type=int, default=None,
                        help=f"training seeds per variant (default {SEEDS}; grid: 1)")
    parser.add_argument("--dir", type=Path, default=None, help="run folders (default: the recipe's, in outputs/)")
    parser.add_argument("--archive", type=Path, default=None, help="the archive (default: the recipe's, results/)")
    parser.add_argument("--commit", action="store_true", help="git-commit each archive record as it lands")
    parser.add_argument("--from-archive", action="store_true", help="only rebuild the tables from the archive")
    parser.add_argument("--source-lengths", type=Path, default=None, metavar="CKPT",
                        help="archive the test sources' lengths from a checkpoint of the study (for an archive "
                             "decoded before evaluations recorded them), then rebuild the tables as --from-archive")
    parser.add_argument("--train-args", default="", help="extra seqlab train overrides, one string")
    parser.add_argument("--eval-args", default="", help="extra seqlab evaluate overrides, one string")
    grid = parser.add_argument_group("the grid")
    grid.add_argument("--grid", action="store_true", help="train and evaluate the GRID instead of the questions")
    grid.add_argument("--experiment", default="mt_bible_small")
    grid.add_argument("--budget", default="00:00:04:00", help="trainer.max_time per run, DD:HH:MM:SS (or null)")
    grid.add_argument("--limit", type=int, default=300, help="test sentences per evaluation")
    return cli.run("study", parser, argv, lambda args: body(args, parser))


def body(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    train_args, eval_args = tuple(shlex.split(args.train_args)), tuple(shlex.split(args.eval_args))
    if args.grid:
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        folder = args.dir or Path("outputs/sweep_arch") / stamp
        runs = grid_runs(args.seeds or 1, folder, args.experiment, args.budget, args.limit, f"sweep_arch-{stamp}")
        failed = execute(runs, None, train_args, eval_args)
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
    if args.source_lengths is not None:
        print(f"study: wrote {archive_source_lengths(archive, args.source_lengths)}", file=sys.stderr)
    elif not args.from_archive:
        runs = study_runs(questions, args.seeds or SEEDS, recipe, args.dir or recipe.folder)
        failed = execute(runs, archive, train_args, eval_args, commit=args.commit)
    try:
        print(tables(archive, recipe, questions))
        page = write_study_report(archive, list(recipe.decodings), (args.dir or recipe.folder) / "report.html",
                                  f"seqlab study: {archive}")
        if page is not None:
            print(f"the study's dashboard: {page}", file=sys.stderr)
    except Exception as err:  # noqa: BLE001  the records are kept; only the summary failed
        failed.append(f"summary ({type(err).__name__}: {err})")
    return report_failures("arch study", failed)


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
