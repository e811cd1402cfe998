"""What a pipeline is: stages (seqlab commands with their overrides, in order) and the tables it renders.

A stage is skipped when the archive (results/<pipeline>/<stage>.json) holds its result for the same
resolved config: the digest of the config seqlab composes for it, with paths dropped and an upstream
stage replaced by its digest, so one digest means one result on any machine. Training stages must stop at
a fixed number of updates (trainer.max_steps, no max_time) and pin their precision (`auto` probes the CPU
at start-up); evaluation stages pin precision and engine. A bench stage's digest also covers the CPU: its
figures hold for one kind of CPU, and each kind gets its own record.

Stages run in folders named by their digest (outputs/pipelines/<command>-<digest>/), so experiments that
share a stage (the decoding experiments all decode one reference training; the study's questions share their
baseline) run it once per machine. A training cut off resumes from its folder's last checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

RESULTS = Path("results")
OUTPUTS = Path("outputs/pipelines")
EVAL_COMMON = ("split=test", "logger=csv", "precision=fp32", "engine=seqlab")  # pinned: the reported setting


@dataclass(frozen=True)
class Stage:
    """One seqlab command of a pipeline."""

    name: str  # unique within the pipeline; names its archive record
    command: str  # train | evaluate | compare | bench | distill | hf
    overrides: tuple[str, ...] = ()
    # evaluate, bench, distill, hf: the train stage whose checkpoint it reads (evaluate, train: or the hf stage
    # whose imported checkpoint it decodes or fine-tunes); train: or the distill stage whose corpus it trains on
    after: str | None = None
    compares: tuple[str, ...] = ()  # compare: the evaluation stages it pairs, the baseline first
    diverges: bool = False  # train: a non-finite loss is a result (archived as diverged), not a failure
    checkpoint: str | None = None  # evaluate: its training's `last` or `best` checkpoint; None: best (distill: last)
    # compare: an evaluation another experiment archived (`EXPERIMENT/STAGE`), read from results/ as the baseline
    baseline: str | None = None

    def upstream(self) -> tuple[str, ...]:
        """The stages whose outputs this one reads."""
        return self.compares if self.command == "compare" else (self.after,) if self.after else ()


@dataclass(frozen=True)
class Table:
    """A table a pipeline renders from its archive alone, into the docs between its markers."""

    name: str  # the marker: <!-- table:NAME --> ... <!-- /table:NAME -->
    render: Callable[[Path], str]  # the archive folder -> Markdown
    doc: str  # the page (relative to the repository root) that holds it


@dataclass(frozen=True)
class Pipeline:
    """An experiment: its stages, in order, and the tables it renders from its archive."""

    name: str
    summary: str
    stages: tuple[Stage, ...]
    tables: tuple[Table, ...] = field(default_factory=tuple)
    folder: Path | None = None  # its archive; default results/<name> (RESULTS: a main checkout's from a worktree)
    stage_root: Path | None = None  # where its stages run; default the folder every pipeline shares (OUTPUTS)

    @property
    def archive(self) -> Path:
        return self.folder if self.folder is not None else RESULTS / self.name

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    def __post_init__(self) -> None:
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"pipeline {self.name}: stage names repeat: {names}")
        for s in self.stages:
            for up in s.upstream():
                if up not in names[: names.index(s.name)]:
                    raise ValueError(f"pipeline {self.name}: stage {s.name} reads {up}, which is not an earlier "
                                     "stage")
            if s.command == "compare" and (len(s.compares) + (s.baseline is not None) < 2 or any(
                    self.stage(c).command != "evaluate" for c in s.compares)):
                raise ValueError(f"pipeline {self.name}: compare stage {s.name} needs two or more evaluations, "
                                 f"the baseline first (has {list(s.compares)}, baseline {s.baseline})")
