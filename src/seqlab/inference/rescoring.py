"""A setting evaluated before: skipped, or its recorded hypotheses scored by the neural metrics it lacks.

A finished setting asked again with a neural metric it lacks, or recorded with another model than the one
asked for, is not decoded again: its hypotheses.jsonl is read and scored (`score_recorded`). A metric's earlier
scores go first, so a rescore that fails leaves no score of another model under settings that name this one,
and the metric stays unscored: the next run retries it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from seqlab.inference.neural import add_neural_metrics
from seqlab.metrics import declarations as M
from seqlab.metrics import keys as K
from seqlab.metrics.neural import NeuralSettings, check_neural
from seqlab.tracking.results import ResultDir

log = logging.getLogger("seqlab.evaluate")


@dataclass
class RecordedRow:
    """A hypotheses.jsonl line, as the neural metrics read it."""

    source: str
    hypothesis: str
    reference: str
    references: list[str] | None
    segment_scores: dict[str, float] | None


@dataclass(frozen=True)
class Rescoring:
    """What a finished setting is checked and rescored against: the metrics chosen, the neural models asked
    for, whether `force=true` decodes it again, and the intervals' seed and resamples."""

    chosen: tuple[str, ...]
    neural: NeuralSettings
    force: bool
    ci_seed: int
    n_bootstrap: int


def unscored(out: ResultDir, chosen: tuple[str, ...], neural: NeuralSettings) -> list[str]:
    """The chosen neural metrics a finished setting lacks, or recorded with another model than `neural` asks
    for (its segment scores are then computed again)."""
    try:
        payload = json.loads(out.metrics_path.read_text())
    except (OSError, json.JSONDecodeError):
        return [m for m in chosen if m in M.neural()]
    recorded = (payload.get("settings") or {}).get("neural") or {}
    asked = neural.to_dict()  # each metric's model settings under its name (NeuralSettings.of)
    return [m for m in chosen if m in M.neural()
            and (m not in (payload.get("metrics") or {}) or recorded.get(m) != asked[m])]


def score_recorded(out: ResultDir, missing: list[str], how: Rescoring) -> dict[str, Any]:
    """Score a finished setting's recorded hypotheses with the neural metrics `missing` (without decoding them
    again) and add the scores to its files (its W&B run is not reopened); see the module docstring."""
    payload = json.loads(out.metrics_path.read_text())
    check_neural(missing, how.neural, have_references=True)
    lines = out.read_hypotheses()
    rows = [RecordedRow(r["source"], r["hypothesis"], r["reference"], r.get("references"),
                        {k: v for k, v in (r.get(K.SEGMENT_SCORES) or {}).items() if k not in missing} or None)
            for r in lines]
    metrics = {k: v for k, v in payload["metrics"].items() if M.metric_of(k) not in missing}
    metrics.pop(K.METRIC_ERRORS, None)
    add_neural_metrics(rows, metrics, missing, how.neural, how.ci_seed, how.n_bootstrap)
    for line, row in zip(lines, rows, strict=True):
        line.pop(K.SEGMENT_SCORES, None)
        if row.segment_scores:
            line[K.SEGMENT_SCORES] = row.segment_scores
    out.write_hypotheses(lines)
    payload["metrics"] = metrics
    settings = payload.setdefault("settings", {})
    failed = metrics.get(K.METRIC_ERRORS) or {}
    recorded = {m: v for m, v in (settings.get("neural") or {}).items() if m not in failed}
    settings["neural"] = {**recorded, **{m: how.neural.to_dict()[m] for m in missing if m not in failed}}
    out.write_metrics(payload)
    log.info("scored the recorded hypotheses of %s with %s (no decoding)%s", out.path, missing,
             f"; failed: {sorted(failed)}" if failed else "")
    return payload


def finished_before(out: ResultDir, how: Rescoring) -> dict[str, Any] | None:
    """A setting evaluated before: skipped, or its recorded hypotheses scored by the neural metrics it lacks;
    None where it must be decoded (not yet, a text metric missing, or force=true)."""
    text_done = out.finished([m for m in how.chosen if m not in M.neural()]) and not how.force
    missing = unscored(out, how.chosen, how.neural) if text_done else []
    if text_done and not missing:
        log.info("already evaluated: %s (force=true to redo)", out.metrics_path)
        return {"status": "skipped", "path": str(out.path)}
    if text_done and out.has_hypotheses():
        return score_recorded(out, missing, how)
    return None
