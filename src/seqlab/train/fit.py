"""Pieces of a training run that are not the module: checkpoint callbacks and resume lookup."""

from __future__ import annotations

import logging
from pathlib import Path

from lightning.pytorch.callbacks import ModelCheckpoint

from seqlab.checkpoint import BEST, LAST, CheckpointError, read_checkpoint

log = logging.getLogger(__name__)
CHECKPOINT_DIR = "checkpoints"


def checkpoint_callbacks(run_dir: Path, every_n_steps: int) -> list[ModelCheckpoint]:
    """`best.ckpt` (lowest val/loss; a NaN loss never wins) and `last.ckpt` every N steps."""
    ckpt_dir = run_dir / CHECKPOINT_DIR
    best = ModelCheckpoint(dirpath=ckpt_dir, filename=BEST, monitor="val/loss", mode="min", save_top_k=1,
                           auto_insert_metric_name=False, enable_version_counter=False)
    last = ModelCheckpoint(dirpath=ckpt_dir, filename=LAST, every_n_train_steps=every_n_steps,
                           save_top_k=1, save_on_train_epoch_end=True, enable_version_counter=False)
    return [best, last]


def find_resume(resume: str | None, runs_root: Path) -> str | None:
    """`None`: start fresh. `auto`: the newest last.ckpt under runs_root (fresh if none). Else a path."""
    if resume is None:
        return None
    if resume == "auto":
        found = sorted(runs_root.glob(f"**/{CHECKPOINT_DIR}/{LAST}.ckpt"), key=lambda p: p.stat().st_mtime)
        for candidate in reversed(found):
            try:
                read_checkpoint(candidate)
            except CheckpointError as err:
                log.warning("skipping unreadable checkpoint: %s", err)
                continue
            log.info("resuming from %s", candidate)
            return str(candidate)
        log.info("train.resume=auto: no checkpoint under %s; starting fresh", runs_root)
        return None
    read_checkpoint(resume)  # a clear error now rather than deep inside Lightning
    return str(Path(resume).expanduser())
