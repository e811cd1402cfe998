"""Evaluation results on disk: one folder per (checkpoint, split, decoding) with metrics.json.

A folder's name holds a hash of everything that determines the result, so a
re-run of a sweep finds finished settings and skips them, and the report reads
all of them back.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqlab.checkpoint import CHECKPOINT_DIR, CheckpointError, resolve, run_dir_of
from seqlab.digest import cache_key
from seqlab.io import atomic_write_text
from seqlab.metrics import declarations as M
from seqlab.metrics import keys as K

METRICS_FILE = "metrics.json"
HYPOTHESES_FILE = "hypotheses.jsonl"
CANDIDATES_FILE = "candidates.jsonl"  # MBR: every source's candidates, expected utilities and chosen index
OK, FAILED, INTERRUPTED = "ok", "failed", "interrupted"
DIVERGED = "diverged"  # a training record's status where it hit a non-finite loss: a result, not a failure
VAL_LOSS = "val/loss"
TRAIN_LOSS = "train/loss"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResultDir:
    path: Path

    @classmethod
    def for_evaluation(cls, root: Path, checkpoint: str, label: str, split: str, limit: int | None,
                       decoding: dict[str, Any] | str, precision: str, engine: str,
                       test_set: dict[str, Any] | None, ensemble: dict[str, Any] | None = None,
                       languages: dict[str, Any] | None = None) -> tuple[ResultDir, dict[str, Any]]:
        """An evaluation's folder, named by the setting's label, and the values that key it: the checkpoint
        (its path, size and time, so a retrained checkpoint at the same path gets another folder), split,
        limit, decoding (`"checkpoint"`: its own defaults), precision, engine, another test set, an ensemble's
        other checkpoints and rule, and the language codes or task prefix asked for. Defaults stay out of the
        key, so results written before a field existed keep their keys (docs/reliability.md, "Compatibility")."""
        try:
            stat = resolve(checkpoint).stat()
            version: list[int] | None = [stat.st_size, int(stat.st_mtime)]
        except CheckpointError:
            version = None  # recorded as a failure when the checkpoint loads, with the reason
        setting: dict[str, Any] = {"ckpt": checkpoint, "version": version, "split": split, "limit": limit,
                                   "decoding": decoding}
        if precision != "fp32":
            setting["precision"] = precision
        if engine != "seqlab":
            setting["engine"] = engine
        if test_set is not None:
            setting["test_set"] = test_set
        if ensemble is not None:
            setting["ensemble"] = ensemble
        if languages:
            setting["languages"] = languages
        return cls.for_setting(root, checkpoint, label, setting), setting

    @classmethod
    def for_setting(cls, root: Path, checkpoint: str, label: str, setting: dict[str, Any]) -> ResultDir:
        """`<checkpoint's run>/<label>-<key>`. The key alone identifies the setting: a folder with the same
        key under another label (written when the folder took the raw config's method, `beam-<key>`) is the
        same setting's, and is renamed to the label, so it is found and skipped rather than redone
        (docs/reliability.md, "Compatibility")."""
        path = Path(checkpoint)
        model = root / (run_dir_of(path).name if path.parent.name == CHECKPOINT_DIR else path.stem)
        key = cache_key(setting)
        folder = model / f"{label}-{key}"
        earlier = [] if folder.exists() else sorted(model.glob(f"*-{key}"))
        if earlier:
            earlier[0].rename(folder)
            log.info("result folder %s renamed to %s (the setting's label)", earlier[0], folder.name)
        return cls(folder)

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS_FILE

    def finished(self, metrics: Sequence[str] = ()) -> bool:
        """Whether this setting has results, with each of `metrics` (`metrics=[...]` choices) among them (a
        choice by the metrics it computes: `rouge` by ROUGE-1/2/L/Lsum): a setting evaluated before a metric
        was chosen is evaluated again to add it."""
        if not self.metrics_path.exists():
            return False
        try:
            payload = json.loads(self.metrics_path.read_text())
        except (OSError, json.JSONDecodeError):
            return False
        have = payload.get("metrics") or {}
        return payload.get("status") == OK and all(k in have for k in M.computed_by(metrics))

    def write_metrics(self, payload: dict[str, Any]) -> None:
        atomic_write_text(self.metrics_path, json.dumps(payload, indent=2, sort_keys=True, default=str))

    def has_hypotheses(self) -> bool:
        return (self.path / HYPOTHESES_FILE).is_file()

    def read_hypotheses(self) -> list[dict[str, Any]]:
        """hypotheses.jsonl's lines (as write_hypotheses wrote them)."""
        text = (self.path / HYPOTHESES_FILE).read_text(encoding="utf-8")
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def write_hypotheses(self, records: list[dict[str, Any]]) -> None:
        self.write_jsonl(HYPOTHESES_FILE, records)

    def write_candidates(self, rows: list[dict[str, Any]]) -> None:
        self.write_jsonl(CANDIDATES_FILE, rows)

    def write_jsonl(self, name: str, rows: list[dict[str, Any]]) -> None:
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        atomic_write_text(self.path / name, text)


def load_results(root: Path) -> list[dict[str, Any]]:
    """Every metrics.json under root (finished or failed), sorted by path."""
    found = []
    for path in sorted(root.glob(f"**/{METRICS_FILE}")):
        try:
            payload = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        payload["_path"] = str(path.parent)
        found.append(payload)
    return found


def source_tokens_of(rows: list[dict[str, Any]]) -> list[int] | None:
    """Each row's source length in subword tokens (hypotheses.jsonl), or None when any row lacks it (an
    evaluation from before they were recorded)."""
    lengths = [r.get("source_tokens") for r in rows]
    return None if None in lengths else lengths


def segment_scores_of(rows: Sequence[dict[str, Any]]) -> dict[str, list[float]]:
    """Each neural metric every row of hypotheses.jsonl has a segment score for: its scores, in row order."""
    names = [m for m in M.neural() if rows and all(m in (r.get(K.SEGMENT_SCORES) or {}) for r in rows)]
    return {m: [float(r[K.SEGMENT_SCORES][m]) for r in rows] for m in names}


def variant_of(payload: dict[str, Any]) -> str:
    """Everything that identifies a result apart from the training seed (older results: run name + model)."""
    ckpt = payload.get("checkpoint", {})
    what = ckpt.get("variant") or json.dumps([ckpt.get("run_name"), ckpt.get("model")], sort_keys=True)
    return json.dumps([what, payload.get("label"), payload.get("split"), payload.get("setting", {}).get("limit")])


def variant_key(run_config: dict[str, Any]) -> str:
    """A digest of the training config without its seed and paths: runs that differ only in seed share it."""
    kept = {k: v for k, v in run_config.items() if k not in ("seed", "paths", "logger")}
    kept["train"] = {k: v for k, v in (kept.get("train") or {}).items() if k != "resume"}
    return cache_key(kept)


def read_curves(metrics_csv: Path, keys: tuple[str, ...]) -> dict[str, list[tuple[int, float]]]:
    """(step, value) rows of each key in a Lightning CSVLogger file, steps counted from 1 (empty if absent)."""
    curves: dict[str, list[tuple[int, float]]] = {k: [] for k in keys}
    if not metrics_csv.is_file():
        return curves
    with metrics_csv.open(newline="") as f:
        for row in csv.DictReader(f):
            for key in keys:
                if row.get(key):
                    curves[key].append((int(row["step"]) + 1, float(row[key])))
    return curves


def read_val_curve(metrics_csv: Path) -> list[tuple[int, float]]:
    """(step, val/loss) rows of a Lightning CSVLogger file; steps counted from 1."""
    return read_curves(metrics_csv, (VAL_LOSS,))[VAL_LOSS]


def read_train_curve(metrics_csv: Path, at: list[int]) -> list[tuple[int, float]]:
    """(step, mean train/loss) at each of the steps `at` (the validations'): the mean of the training losses
    logged after the step before and up to this one, so that each point sits beside its validation loss
    (one logged batch is noisy; an interval's mean is what a curve of fit reads). Intervals with no logged loss
    are left out."""
    logged = read_curves(metrics_csv, (TRAIN_LOSS,))[TRAIN_LOSS]
    out, start = [], 0
    for step in at:
        values = [v for s, v in logged if start < s <= step]
        if values:
            out.append((step, sum(values) / len(values)))
        start = step
    return out
