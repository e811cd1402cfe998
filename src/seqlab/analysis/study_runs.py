"""Running the architecture study: a job that outlives any one sitting.

Each run trains in its own process (`seqlab train`), then decodes the test split once per setting of its
recipe (`seqlab evaluate`). What is finished is read from the committed archive (seqlab.analysis.study),
never from `outputs/`, which a fresh machine lacks: a run whose records are all archived is skipped, and
each (run, decoding) record is archived, and with `commit` committed, the moment it is written. A run cut
off mid-way resumes from its own `last.ckpt` (or starts over where the folder has none). Seeds run
outermost, so a stopped study leaves complete seeds behind.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from seqlab.analysis.commands import Command, commit_archive, seqlab
from seqlab.analysis.study import (
    DIVERGED,
    GRID,
    TRAINING,
    VARIANTS,
    Recipe,
    Record,
    archived,
    write_record,
)
from seqlab.analysis.study_questions import QUESTIONS
from seqlab.checkpoint import LAST, checkpoint_file, read_checkpoint
from seqlab.model import ModelConfig
from seqlab.model.params import analytic_counts
from seqlab.provenance import Provenance, capture
from seqlab.tracking.results import HYPOTHESES_FILE, METRICS_FILE, OK, read_val_curve, source_tokens_of
from seqlab.tracking.wandb import CSV_DIR

EVAL_COMMON = ("split=test", "logger=csv", "precision=fp32", "engine=seqlab")  # pinned: the reported setting
PROGRESS = re.compile(r"^\[(?P<time>[\d\- :,]+)\].* - step (?P<step>\d+) .* (?P<elapsed>\d+)s\s+ETA")
DIVERGENCE = re.compile(r"non-finite loss at step (\d+)")



@dataclass(frozen=True)
class Evaluation:
    label: str  # the archive label (beam5, greedy)
    overrides: tuple[str, ...]  # seqlab evaluate overrides

    @property
    def results_dir(self) -> Path | None:
        """Where the decoding's result folders go (None: evaluate's default)."""
        given = [o.split("=", 1)[1] for o in self.overrides if o.startswith("results_dir=")]
        return Path(given[-1]) if given else None


@dataclass(frozen=True)
class Run:
    """One training run and the decodings that follow it."""

    name: str  # <variant>-seed<N>
    folder: Path  # its run folder (hydra.run.dir)
    train: tuple[str, ...]  # seqlab train overrides
    evaluations: tuple[Evaluation, ...]

    @property
    def variant(self) -> str:
        return self.name.rsplit("-seed", 1)[0]

    @property
    def checkpoint(self) -> Path:
        """What its decodings read: the last checkpoint, the model after exactly the recipe's updates (not the
        best on validation, which would make the number of updates differ between runs)."""
        return checkpoint_file(self.folder, LAST)

    @property
    def seed(self) -> int:
        return int(self.name.rsplit("-seed", 1)[1])

    def labels(self) -> list[str]:
        """The archive labels this run owes: one per decoding, or TRAINING for an undecoded question."""
        return [e.label for e in self.evaluations] or [TRAINING]


def study_runs(questions: list[str], seeds: int, recipe: Recipe, folder: Path) -> list[Run]:
    """Each question's variants (the baseline once), seeds outermost, each decoded with the recipe's settings
    (a question judged on validation loss is not decoded)."""
    variants = list(dict.fromkeys(v for q in questions for v in QUESTIONS[q].variants))
    undecoded = {v for q in questions if not QUESTIONS[q].decoded for v in QUESTIONS[q].variants}
    most = {v: min([seeds] + [QUESTIONS[q].seeds for q in questions if v in QUESTIONS[q].variants
                              and QUESTIONS[q].seeds is not None]) for v in variants}
    runs = []
    for seed in range(seeds):
        for variant in [v for v in variants if seed < most[v]]:
            name = f"{variant}-seed{seed}"
            run_folder = folder / "runs" / name
            evaluations = () if variant in undecoded else tuple(
                Evaluation(label, (f"decoding={preset}", *EVAL_COMMON, f"results_dir={folder / 'results' / label}"))
                for label, preset in recipe.decodings.items())
            runs.append(Run(name, run_folder, (f"experiment={recipe.experiment}", f"seed={seed}",
                                               f"run_name=arch_{variant}", f"hydra.run.dir={run_folder}",
                                               *VARIANTS[variant]), evaluations))
    return runs


def grid_runs(seeds: int, folder: Path, experiment: str, budget: str, limit: int, group: str) -> list[Run]:
    """Every combination of GRID, greedy and beam 5 on the first `limit` test sentences, in one W&B group."""
    runs = []
    for seed, values in itertools.product(range(seeds), itertools.product(*GRID.values())):
        name = "-".join(v for v in values) + f"-seed{seed}"
        overrides = tuple(f"{k}={v}" for k, v in zip(GRID, values, strict=True))
        runs.append(Run(name, folder / name, (f"experiment={experiment}", *overrides, f"seed={seed}",
                                              f"trainer.max_time={budget}", "train.quick_eval_size=0",
                                              f"logger.group={group}", f"hydra.run.dir={folder / name}"),
                        tuple(Evaluation(label, (f"decoding={preset}", "split=test", f"limit={limit}",
                                                 f"logger.group={group}"))
                              for label, preset in (("greedy", "greedy"), ("beam5", "beam")))))
    return runs


def training_wall(log_text: str) -> tuple[float, int, str | None]:
    """(seconds, sittings, when the last progress line was written) from a run folder's train.log: each
    sitting's progress lines count elapsed time from its start, so a drop starts a new sitting."""
    total, sittings, last, when = 0.0, 0, -1.0, None
    for line in log_text.splitlines():
        match = PROGRESS.match(line)
        if not match:
            continue
        elapsed = float(match["elapsed"])
        if elapsed < last or sittings == 0:
            sittings += 1
            total += max(last, 0.0) if sittings > 1 else 0.0
        last, when = elapsed, match["time"]
    return total + max(last, 0.0), sittings, when


def training_provenance(run: Run, train_args: tuple[str, ...], commit: str | None, updates: int) -> Provenance:
    """The training's record: its command, the commit its checkpoint names, precision, summed wall time."""
    log_path = run.folder / "train.log"
    wall, sittings, _ = training_wall(log_path.read_text() if log_path.is_file() else "")
    hparams = yaml.safe_load((run.folder / CSV_DIR / "hparams.yaml").read_text())
    rev = commit or ""
    return capture(" ".join(["seqlab train", *run.train, *train_args]), str(hparams["trainer"]["precision"]), None,
                   wall, updates, commit=rev.removesuffix("-dirty") or None, clean=bool(rev) and
                   not rev.endswith("-dirty"))


def record_from_evaluation(run: Run, evaluation: Evaluation, eval_args: tuple[str, ...], train_args: tuple[str, ...],
                           wall_s: float) -> tuple[Record, list[str], list[int] | None]:
    """The archive record of a finished decoding, its references and its sources' lengths in subword tokens
    (None from an evaluation that did not record them)."""
    results = next(p for p in (evaluation.results_dir / run.name).glob(f"*/{METRICS_FILE}")
                   if json.loads(p.read_text()).get("status") == OK)
    payload = json.loads(results.read_text())
    rows = [json.loads(line) for line in (results.parent / HYPOTHESES_FILE).read_text().splitlines()]
    ckpt = payload["checkpoint"]
    decoded = capture(" ".join(["seqlab evaluate", f"ckpt={run.checkpoint}", *evaluation.overrides, *eval_args]),
                      str(payload["settings"]["precision"]), str(payload["engine"]), wall_s, ckpt["step"])
    record = Record(run.variant, run.seed, evaluation.label,
                    {k: v for k, v in payload["metrics"].items() if not k.endswith("signature")},
                    read_val_curve(run.folder / CSV_DIR / "metrics.csv"),
                    analytic_counts(ModelConfig.from_dict(ckpt["model"])).total, ckpt["step"], ckpt["model"],
                    training=training_provenance(run, train_args, ckpt.get("git_revision"), ckpt["step"]).to_dict(),
                    evaluation=decoded.to_dict(), hypotheses=[r["hypothesis"] for r in rows])
    return record, [r["reference"] for r in rows], source_tokens_of(rows)


def record_from_training(run: Run, train_args: tuple[str, ...]) -> Record:
    """The archive record of an undecoded run: its validation curve, or that it diverged."""
    log_text = (run.folder / "train.log").read_text() if (run.folder / "train.log").is_file() else ""
    diverged = DIVERGENCE.findall(log_text)
    last = checkpoint_file(run.folder, LAST)
    meta = read_checkpoint(last)["seqlab"] if last.is_file() else {}
    model = meta.get("model_config") or {}
    steps = int(diverged[-1]) if diverged else int(meta.get("step", 0))
    return Record(run.variant, run.seed, TRAINING, {}, read_val_curve(run.folder / CSV_DIR / "metrics.csv"),
                  analytic_counts(ModelConfig.from_dict(model)).total if model else 0, steps, model,
                  status=DIVERGED if diverged else OK,
                  training=training_provenance(run, train_args, meta.get("git_revision"), steps).to_dict())


def execute(runs: list[Run], archive: Path | None, train_args: tuple[str, ...] = (), eval_args: tuple[str, ...] = (),
            commit: bool = False, command: Command = seqlab) -> list[str]:
    """Train and decode each run whose records the archive lacks, archiving each record as it lands
    (`archive` None: every run, nothing archived). Returns what failed (a diverged training of an undecoded
    question is a result, not a failure)."""
    failed = []
    for run in runs:
        owed = [label for label in run.labels() if archive is None or not archived(archive, run.name, label)]
        if not owed:
            print(f"== {run.name}: archived", file=sys.stderr)
            continue
        last = checkpoint_file(run.folder, LAST)
        resume = (f"train.resume={last}",) if last.is_file() else ()
        print(f"== {run.name}: {'resuming' if resume else 'training'}", file=sys.stderr)
        trained = command("train", *run.train, *resume, *train_args)
        if not run.evaluations and archive is not None:
            record = record_from_training(run, train_args) if (trained or _diverged(run)) else None
            if record is None:
                failed.append(f"{run.name} (training)")
            else:
                _archive(archive, record, None, commit)
            continue
        if not trained:
            failed.append(f"{run.name} (training)")
            continue
        for evaluation in run.evaluations:
            if evaluation.label not in owed:
                continue
            start = time.perf_counter()
            if not command("evaluate", f"ckpt={run.checkpoint}", *evaluation.overrides, *eval_args):
                failed.append(f"{run.name} (decoding {evaluation.label})")
                continue
            if archive is None:
                continue
            record, references, lengths = record_from_evaluation(run, evaluation, eval_args, train_args,
                                                                 time.perf_counter() - start)
            _archive(archive, record, references, commit, lengths)
    return failed


def _diverged(run: Run) -> bool:
    log_path = run.folder / "train.log"
    return log_path.is_file() and bool(DIVERGENCE.search(log_path.read_text()))


def _archive(archive: Path, record: Record, references: list[str] | None, commit: bool,
             source_tokens: list[int] | None = None) -> None:
    write_record(archive, record, references, source_tokens)
    print(f"== {record.name}: archived {record.label} ({record.status})", file=sys.stderr)
    if commit:
        commit_archive(archive, f"{archive.name}: {record.name} {record.label}")
