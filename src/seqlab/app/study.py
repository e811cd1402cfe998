"""`seqlab study [QUESTION ...] [--seeds 3]` (`make study`): the architecture study; `seqlab study --grid`
(`seqlab sweep-arch`, `make sweep-arch`): the norm x positions x tying grid at a short budget.

Every run trains in its own process (`seqlab train`), then is evaluated (`seqlab evaluate`). In the study
a run whose evaluation already exists is skipped, so a stopped study continues where it stopped and the
baseline is trained once per seed for all questions; seeds run outermost, so a stopped study leaves
complete seeds behind. A failed run is reported and the others go on; the exit status says whether any
failed. Then the study's tables (seqlab.analysis.study), or for the grid the HTML report.
The study's budget and schedule live in conf/experiment/arch_study.yaml, its variants in
seqlab.analysis.study.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from seqlab.analysis.study import GRID, QUESTIONS, VARIANTS, collect, load_archive, question_table, val_curves_png
from seqlab.io import atomic_write_text
from seqlab.tracking.results import METRICS_FILE, OK


@dataclass(frozen=True)
class Run:
    """One training run and the evaluations that follow it."""

    name: str  # its folder name: <variant>-seed<N>
    train: tuple[str, ...]  # seqlab train overrides
    evaluations: tuple[tuple[str, ...], ...]  # seqlab evaluate overrides, one tuple per setting


def study_runs(questions: list[str], seeds: int, folder: Path) -> list[Run]:
    """Each question's variants (the baseline once), seeds outermost, each evaluated greedily on the test split."""
    variants = list(dict.fromkeys(v for q in questions for v in QUESTIONS[q][1]))
    runs = []
    for seed, variant in itertools.product(range(seeds), variants):
        name = f"{variant}-seed{seed}"
        runs.append(Run(name, ("experiment=arch_study", f"seed={seed}", f"run_name=arch_{variant}",
                               f"hydra.run.dir={folder / 'runs' / name}", *VARIANTS[variant]),
                        (("decoding=greedy", "split=test", "logger=csv", f"results_dir={folder / 'results'}"),)))
    return runs


def grid_runs(seeds: int, folder: Path, experiment: str, budget: str, limit: int, group: str) -> list[Run]:
    """Every combination of GRID, greedy and beam 5 on the first `limit` test sentences, in one W&B group."""
    runs = []
    for seed, values in itertools.product(range(seeds), itertools.product(*GRID.values())):
        name = "-".join(v for v in values) + f"-seed{seed}"
        overrides = tuple(f"{k}={v}" for k, v in zip(GRID, values, strict=True))
        runs.append(Run(name, (f"experiment={experiment}", *overrides, f"seed={seed}", f"trainer.max_time={budget}",
                               "train.quick_eval_size=0", f"logger.group={group}",
                               f"hydra.run.dir={folder / name}"),
                        tuple((f"decoding={d}", "split=test", f"limit={limit}", f"logger.group={group}")
                              for d in ("greedy", "beam"))))
    return runs


def evaluated(results: Path, name: str) -> bool:
    """Whether a run already has a successful evaluation under `results`."""
    return any(json.loads(p.read_text()).get("status") == OK for p in results.glob(f"{name}/*/{METRICS_FILE}"))


def seqlab(*args: str) -> bool:
    """Run a seqlab command in its own process (a crash or OOM ends that run only); whether it succeeded."""
    return subprocess.run([sys.executable, "-m", "seqlab", *args]).returncode == 0


def execute(runs: list[Run], train_args: list[str], eval_args: list[str], results: Path | None) -> list[str]:
    """Train and evaluate each run; `results`: skip runs already evaluated there. Returns what failed."""
    failed = []
    for run in runs:
        if results is not None and evaluated(results, run.name):
            print(f"== {run.name}: done", file=sys.stderr)
            continue
        print(f"== {run.name}: training", file=sys.stderr)
        if not seqlab("train", *run.train, *train_args):
            failed.append(f"{run.name} (training)")
            continue
        run_dir = next(o.split("=", 1)[1] for o in run.train if o.startswith("hydra.run.dir="))
        for overrides in run.evaluations:
            if not seqlab("evaluate", f"ckpt={run_dir}", *overrides, *eval_args):
                failed.append(f"{run.name} (evaluation {' '.join(overrides[:1])})")
    return failed


def tables(study: Path | None, archive: Path, questions: list[str]) -> str:
    """Archive the study's finished runs (unless `study` is None) and write each question's table."""
    if study is not None:
        found = collect(study, archive)
        print(f"archived {len(found)} runs into {archive}", file=sys.stderr)
    runs, refs = load_archive(archive)
    sections, summary = [], {}
    for q in questions:
        table, data = question_table(q, runs, refs)
        sections.append(table)
        summary[q] = data
    text = "\n\n".join(sections)
    val_curves_png(runs, archive / "val_loss.png")
    atomic_write_text(archive / "summary.md", text + "\n")
    atomic_write_text(archive / "summary.json", json.dumps(summary, indent=1))
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="seqlab study", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("questions", nargs="*", default=["all"],
                        help=f"which questions: {', '.join(QUESTIONS)} or all (the default)")
    parser.add_argument("--seeds", type=int, default=None, help="training seeds per variant (default 3; grid: 1)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="the study folder (outputs/arch_study; grid: outputs/sweep_arch/<time>)")
    parser.add_argument("--archive", type=Path, default=Path("results/arch_study"))
    parser.add_argument("--tables-only", action="store_true", help="tabulate the study folder's finished runs")
    parser.add_argument("--from-archive", action="store_true", help="rebuild the tables from the archive alone")
    parser.add_argument("--train-args", default="", help="extra seqlab train overrides, one string")
    parser.add_argument("--eval-args", default="", help="extra seqlab evaluate overrides, one string")
    grid = parser.add_argument_group("the grid")
    grid.add_argument("--grid", action="store_true", help="train and evaluate the GRID instead of the questions")
    grid.add_argument("--experiment", default="mt_bible_small")
    grid.add_argument("--budget", default="00:00:04:00", help="trainer.max_time per run, DD:HH:MM:SS (or null)")
    grid.add_argument("--limit", type=int, default=300, help="test sentences per evaluation")
    args = parser.parse_args(argv)
    train_args, eval_args = shlex.split(args.train_args), shlex.split(args.eval_args)
    if args.grid:
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        folder = args.dir or Path("outputs/sweep_arch") / stamp
        runs = grid_runs(args.seeds or 1, folder, args.experiment, args.budget, args.limit, f"sweep_arch-{stamp}")
        failed = execute(runs, train_args, eval_args, results=None)
    else:
        questions = list(QUESTIONS) if "all" in args.questions else args.questions
        unknown = [q for q in questions if q not in QUESTIONS]
        if unknown:
            parser.error(f"unknown question(s) {unknown}; use {', '.join(QUESTIONS)} or all")
        folder = args.dir or Path("outputs/arch_study")
        failed = []
        if not (args.tables_only or args.from_archive):
            failed = execute(study_runs(questions, args.seeds or 3, folder), train_args, eval_args, folder / "results")
        try:
            print(tables(None if args.from_archive else folder, args.archive, questions))
        except Exception as err:  # noqa: BLE001  the runs are kept; only the summary failed
            failed.append(f"summary ({type(err).__name__}: {err})")
    what = "sweep-arch" if args.grid else "arch study"
    if failed:
        print(f"{what}: {len(failed)} failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"{what}: every run finished", file=sys.stderr)
    return 0
