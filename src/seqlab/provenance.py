"""Where an archived number came from: the code's commit, the machine, the command and what it cost.

Every archive record (the architecture study's, the pipelines') carries a `Provenance`, so a reported
figure names the commit, CPU, precision and engine that produced it, and how long it took.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from seqlab.hardware import SPEED_FLAGS, cpu_flags, cpu_model

SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the checkout holding src/seqlab
OUTPUTS = ("docs", "README.md", "results")  # what the pipelines write: not the code a record ran


def git_state(root: Path = SOURCE_ROOT) -> tuple[str | None, bool]:
    """(commit, clean) of the checkout at `root`: clean means no change to a tracked file other than what the
    pipelines write (OUTPUTS: the rendered docs and the archives, which a run of one experiment changes
    before the next one's record is made). $SEQLAB_COMMIT,
    where set, names the commit a copy of the tree was made at, unchanged, and wins over any .git the copy
    carries (a GPU machine that gets the files without their history, or with a stale one); outside git
    without it, (None, False)."""
    if os.environ.get("SEQLAB_COMMIT"):
        return os.environ["SEQLAB_COMMIT"], True
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                *(f":!{path}" for path in OUTPUTS)], cwd=root,
                               capture_output=True, text=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None, False
    return rev, not dirty


@dataclass(frozen=True)
class Provenance:
    """One command's record: what ran, on what, at which commit, and for how long."""

    command: str  # the seqlab command line, as run
    commit: str | None  # the seqlab commit that ran it
    clean: bool  # whether that checkout had no uncommitted change to a tracked file
    date: str  # when it finished, UTC, ISO 8601
    cpu: str  # the CPU model
    cpu_flags: tuple[str, ...]  # the flags that decide matmul speed (hardware.SPEED_FLAGS)
    torch: str
    precision: str  # trainer.precision of a training; fp32 | bf16 | int8 of a decoding
    engine: str | None  # the decoding engine; None for a training
    wall_s: float  # seconds the command ran (a resumed training: the sum of its sittings)
    updates: int | None = None  # optimizer updates of the model it trained or decoded with
    device: str | None = None  # the GPU it ran on (torch's name for it); None: the CPU above

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cpu_flags": list(self.cpu_flags)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Provenance:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"provenance record has unknown keys {unknown}; known: {sorted(known)}")
        return cls(**{**values, "cpu_flags": tuple(values.get("cpu_flags", ()))})


def capture(command: str, precision: str, engine: str | None, wall_s: float, updates: int | None = None,
            commit: str | None = None, clean: bool | None = None, device: str | None = None) -> Provenance:
    """This machine's record of a command that just finished; `commit`/`clean` default to this checkout's
    (a training's checkpoint names the commit that trained it, which may be older)."""
    import torch

    here, here_clean = git_state()
    return Provenance(command=command, commit=commit if commit is not None else here,
                      clean=clean if clean is not None else here_clean,
                      date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), cpu=cpu_model(),
                      cpu_flags=tuple(f for f in SPEED_FLAGS if f in cpu_flags()), torch=torch.__version__,
                      precision=precision, engine=engine, wall_s=round(wall_s, 1), updates=updates, device=device)
