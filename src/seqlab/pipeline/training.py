"""What a training stage's record says, read from its run folder: the validation curve, the model and its
parameter count, the updates made, whether it diverged, and the wall time summed over the sittings that
resumed it (each sitting's progress lines count from its own start)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from seqlab.checkpoint import LAST, checkpoint_file, read_checkpoint
from seqlab.model import ModelConfig
from seqlab.model.params import analytic_counts
from seqlab.tracking.results import DIVERGED, OK, read_train_curve, read_val_curve
from seqlab.tracking.wandb import CSV_DIR

LOG = "train.log"
PROGRESS = re.compile(r"^\[(?P<time>[\d\- :,]+)\].* - step (?P<step>\d+) .* (?P<elapsed>\d+)s\s+ETA")
DIVERGENCE = re.compile(r"non-finite loss at step (\d+)")


def training_wall(log_text: str) -> tuple[float, int]:
    """(seconds, sittings) from a run folder's train.log: each sitting's progress lines count elapsed time from
    its start, so a drop starts a new sitting."""
    total, sittings, last = 0.0, 0, -1.0
    for line in log_text.splitlines():
        match = PROGRESS.match(line)
        if not match:
            continue
        elapsed = float(match["elapsed"])
        if elapsed < last or sittings == 0:
            sittings += 1
            total += max(last, 0.0) if sittings > 1 else 0.0
        last = elapsed
    return total + max(last, 0.0), sittings


def log_text(folder: Path) -> str:
    path = folder / LOG
    return path.read_text() if path.is_file() else ""


def diverged_at(folder: Path) -> int | None:
    """The update at which the training hit a non-finite loss, or None."""
    found = DIVERGENCE.findall(log_text(folder))
    return int(found[-1]) if found else None


def training_result(folder: Path) -> tuple[str, dict[str, Any]]:
    """(status, result) of the training in `folder`: its validation curve, the mean training loss over each
    validation's interval (`train_curve`), the updates it made (where it diverged, that update), its model config
    and analytic parameter count (from the last checkpoint)."""
    last = checkpoint_file(folder, LAST)
    ckpt = read_checkpoint(last) if last.is_file() else {}
    model = ckpt.get("seqlab", {}).get("model_config") or {}
    stopped = diverged_at(folder)
    steps = stopped if stopped is not None else int(ckpt.get("global_step", 0))  # past the last validation too
    metrics = folder / CSV_DIR / "metrics.csv"
    val = read_val_curve(metrics)
    return DIVERGED if stopped is not None else OK, {
        "val_curve": val, "train_curve": read_train_curve(metrics, [s for s, _ in val]), "steps": steps, "model": model,
        "params": analytic_counts(ModelConfig.from_dict(model)).total if model else 0}


def wall_time(folder: Path, measured: float) -> float:
    """The training's wall time over every sitting (its log), else what this sitting measured."""
    seconds, sittings = training_wall(log_text(folder))
    return seconds if sittings else measured
