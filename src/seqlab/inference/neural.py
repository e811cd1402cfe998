"""The neural metrics of an evaluation, after its text metrics: each chosen metric's segment scores kept on
the records (hypotheses.jsonl's `segment_scores`), its mean with a bootstrap interval (resampled examples, the
indices the ROUGE intervals use) and its signature in the metrics. A metric that fails here costs only itself:
the hypotheses and every other metric are kept, and the failure is recorded under `metric_errors` (the
setting is evaluated again for it on the next run)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

from seqlab.metrics import declarations as M
from seqlab.metrics import keys as K
from seqlab.metrics.neural import NeuralSettings, neural_scores
from seqlab.metrics.significance import mean_interval, resample_indices

log = logging.getLogger(__name__)


class Scored(Protocol):
    source: str
    hypothesis: str
    reference: str
    references: list[str] | None
    segment_scores: dict[str, float] | None


def reference_streams(records: Sequence[Scored]) -> list[list[str]]:
    refs = [r.references or [r.reference] for r in records]
    return [[r[i] for r in refs] for i in range(min(len(r) for r in refs))] if refs else []


def add_neural_metrics(records: Sequence[Scored], metrics: dict[str, Any], chosen: Sequence[str],
                       settings: NeuralSettings, ci_seed: int, n_bootstrap: int) -> None:
    """Score the records with every chosen neural metric, in place (records and metrics)."""
    names = [m for m in chosen if m in M.neural()]
    if not names or not records:
        return
    sources, hyps = [r.source for r in records], [r.hypothesis for r in records]
    refs = reference_streams(records)
    idx = resample_indices(len(records), ci_seed, n_bootstrap) if n_bootstrap else None
    errors: dict[str, str] = {}
    for name in names:
        try:
            scores = neural_scores(name, settings, sources, hyps, refs)
        except Exception as err:  # noqa: BLE001  (any failure of one metric is recorded; the rest is kept)
            errors[name] = f"{type(err).__name__}: {err}"
            log.error("metric %s failed, the other results are kept: %s", name, errors[name])
            continue
        metrics[name] = sum(scores.segments) / len(scores.segments)
        metrics[K.signature(name)] = scores.signature
        if idx is not None:
            interval = mean_interval(scores.segments, idx)
            metrics[K.ci(name)] = [interval.low, interval.high]
        for key, values in scores.extra.items():
            metrics[key] = sum(values) / len(values)
        for record, value in zip(records, scores.segments, strict=True):
            record.segment_scores = {**(record.segment_scores or {}), name: value}
    if errors:
        metrics[K.METRIC_ERRORS] = errors
