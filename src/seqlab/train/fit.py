"""Pieces of a training run that are not the module: checkpoint callbacks and resume lookup."""

from __future__ import annotations

import logging
import signal
import threading
import time
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback, ModelCheckpoint, Timer

from seqlab.checkpoint import BEST, CHECKPOINT_DIR, LAST, CheckpointError, checkpoint_file, read_checkpoint
from seqlab.config import ConfigError

log = logging.getLogger(__name__)


def checkpoint_callbacks(run_dir: Path, every_n_steps: int, monitor: str = "val/loss", mode: str = "min",
                         keep_last: int = 0) -> list[ModelCheckpoint]:
    """`best.ckpt` (best `monitor`; a NaN never wins), `last.ckpt` every N steps, and with keep_last > 0
    the `keep_last` newest periodic checkpoints as `step-<step>.ckpt` (for checkpoint averaging)."""
    ckpt_dir = run_dir / CHECKPOINT_DIR
    best = ModelCheckpoint(dirpath=ckpt_dir, filename=BEST, monitor=monitor, mode=mode, save_top_k=1,
                           auto_insert_metric_name=False, enable_version_counter=False)
    last = ModelCheckpoint(dirpath=ckpt_dir, filename=LAST, every_n_train_steps=every_n_steps,
                           save_top_k=1, save_on_train_epoch_end=True, enable_version_counter=False)
    if keep_last <= 0 or every_n_steps <= 0:
        return [best, last]
    periodic = ModelCheckpoint(dirpath=ckpt_dir, filename="step-{step:07d}", every_n_train_steps=every_n_steps,
                               monitor="step", mode="max", save_top_k=keep_last, auto_insert_metric_name=False,
                               enable_version_counter=False)
    return [best, last, periodic]


def find_resume(resume: str | None, runs_root: Path, run_dir: Path | None = None) -> str | None:
    """`None`: start fresh. `auto`: this run folder's last.ckpt, else the newest last.ckpt under
    runs_root (fresh if none). Else a path."""
    if resume is None:
        return None
    if resume == "auto":
        found = sorted(runs_root.glob(f"**/{checkpoint_file('', LAST)}"), key=lambda p: p.stat().st_mtime)
        own = checkpoint_file(run_dir, LAST) if run_dir is not None else None
        if own is not None and own.is_file():
            found = [p for p in found if p.resolve() != own.resolve()] + [own]  # this folder's first
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


class RunFolderBusy(RuntimeError):
    """Another process is training in this run folder."""


class RunFolderLock:
    """An exclusive lock on a run folder for the life of a training (flock: released if the process dies).

    Two trainings in one folder would interleave their logs and overwrite each other's
    checkpoints; the second one fails at once instead.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / ".lock"
        self._file: Any = None

    def __enter__(self) -> RunFolderLock:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.close()
            raise RunFolderBusy(f"{self.path.parent}: another training is running in this run folder; give this "
                                "one its own folder (hydra.run.dir=...) or wait for the other") from None
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()


def check_fresh_start(run_dir: Path, resume: str | None, overwrite: bool) -> None:
    """Refuse to start from scratch over a run folder's checkpoints unless told to."""
    existing = sorted((run_dir / CHECKPOINT_DIR).glob("*.ckpt"))
    if existing and resume is None and not overwrite:
        raise ConfigError(f"{run_dir} already holds checkpoints ({', '.join(p.name for p in existing)}); "
                          "continue it with train.resume=auto, or start over with train.overwrite=true")


def save_full(trainer: Any, path: Path) -> None:
    """A checkpoint training resumes from (optimizer, schedule, loops); said explicitly, because
    Lightning's default for `weights_only` is the same but logs that it had to choose."""
    trainer.save_checkpoint(str(path), weights_only=False)


class FinalCheckpoint(Callback):
    """`last.ckpt` always holds the final step, whatever the checkpoint interval (and with interval 0)."""

    def __init__(self, last_path: Path) -> None:
        self.last_path = last_path
        self.saved_step = -1

    def periodic(self, trainer: Any) -> Any:
        """The callback that writes last.ckpt every N steps (None if absent)."""
        return next((c for c in trainer.checkpoint_callbacks if Path(c.dirpath or "") == self.last_path.parent
                     and c.filename == LAST), None)

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        every = getattr(self.periodic(trainer), "_every_n_train_steps", 0)
        if 0 < trainer.max_steps <= step and self.saved_step != step and not (every and step % every == 0):
            save_full(trainer, self.last_path)  # (at a multiple of N the periodic save writes it)
            self.saved_step = step

    def on_train_end(self, trainer: Any, module: Any) -> None:
        saved = max(self.saved_step, getattr(self.periodic(trainer), "_last_global_step_saved", -1))
        if trainer.global_step > 0 and saved != trainer.global_step and not trainer.sanity_checking:
            save_full(trainer, self.last_path)
            self.saved_step = trainer.global_step


class ProgressLog(Callback):
    """One log line every N optimizer steps (step, loss, lr, tokens/s, elapsed, ETA): for logs and pipes,
    where a progress bar would be unreadable."""

    def __init__(self, every_n_steps: int) -> None:
        self.every, self.start = max(1, every_n_steps), time.perf_counter()
        self.tokens, self.first_step = 0, None

    def eta(self, trainer: Any, step: int, elapsed: float) -> str:
        """Time left to max_steps or max_time, whichever comes first, at the speed so far."""
        left = []
        done = step - (self.first_step or 0)
        if trainer.max_steps and trainer.max_steps > 0 and done > 0:
            left.append((trainer.max_steps - step) * elapsed / done)
        timer = next((c for c in trainer.callbacks if isinstance(c, Timer)), None)
        remaining = timer.time_remaining() if timer is not None else None
        if remaining is not None:
            left.append(max(0.0, remaining))
        if not left:
            return "?"
        seconds = int(min(left))
        return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.tokens += batch.n_tokens
        step = trainer.global_step
        if self.first_step is None:
            self.first_step = step - 1
        if step % self.every or not trainer.is_global_zero or step == getattr(self, "_last", -1):
            return
        self._last = step
        m = trainer.callback_metrics
        elapsed = time.perf_counter() - self.start
        log.info("step %d  loss %.3f  lr %.2e  %.0f tok/s  %.0fs  ETA %s", step,
                 float(m.get("train/loss", float("nan"))), float(m.get("train/lr", float("nan"))),
                 self.tokens / max(elapsed, 1e-9), elapsed, self.eta(trainer, step, elapsed))

    def on_validation_end(self, trainer: Any, module: Any) -> None:
        if trainer.is_global_zero and not trainer.sanity_checking:
            shown = {k: round(float(v), 3) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
            log.info("step %d  validation %s", trainer.global_step, shown)


class GracefulStop(Callback):
    """On SIGTERM or SIGINT: finish the current step, write last.ckpt, stop cleanly.

    Lightning validates whenever a run is asked to stop; a stop between validation steps skips that
    validation (a time limit's grace period is for stopping, and the curve keeps its steps). A second
    SIGINT interrupts at once. SIGKILL cannot be caught: then the run
    resumes (`train.resume=auto`) from the last periodic checkpoint, which is never
    half-written because checkpoints are written to a temporary file and renamed.
    """

    def __init__(self, last_path: Path) -> None:
        self.last_path, self.requested, self._previous = last_path, None, {}

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name
        log.warning("%s received: stopping after this step and writing %s", self.requested, self.last_path)

    def on_train_start(self, trainer: Any, module: Any) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handler)

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.requested is not None and not trainer.should_stop:
            save_full(trainer, self.last_path)
            trainer.should_stop = True
            if (trainer.fit_loop.epoch_loop.total_batch_idx + 1) % trainer.val_check_batch:  # not a validation step
                trainer.limit_val_batches = 0

    def on_train_end(self, trainer: Any, module: Any) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous = {}
