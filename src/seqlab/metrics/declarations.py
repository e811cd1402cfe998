"""Quality metrics, each one declaration: what every stage that computes, tests or shows a metric reads.

A `Metric` says which `metrics=[...]` choice computes it, how (sacreBLEU at corpus level; the mean of
per-segment scores from a scoring function; a neural model's segment scores, seqlab.metrics.neural), which
way is better, how tables name it and where they put it, whether it is scored per source-length bucket,
whether `seqlab compare` tests it and whether it is among the defaults. Its interval and paired test follow
from how it is computed (seqlab.metrics.significance): sacreBLEU's bootstrap and `PairedTest` at corpus level,
rouge-score's resampled means and the paired bootstrap on means otherwise (with approximate randomization for
the neural ones, whose segment scores are the statistic). Evaluation, compare, the report, the dashboard and
W&B read these declarations through the functions below, at call time, so a metric declared later (a test's
fixture metric) is read the same way; `tests/unit/test_adding_a_metric.py` declares one.

Statistics that are not quality metrics (log-probs, lengths, diversity, speed) keep their keys in
metrics.keys and their columns where they are shown.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from seqlab.metrics import keys as K
from seqlab.metrics.rouge import rouge_per_example

# sacrebleu: corpus-level, sacreBLEU's own metric object; segments: the mean of per-segment scores from
# `segments`; neural: the mean of a model's segment scores (computed by seqlab.metrics.neural, recorded)
Kind = Literal["sacrebleu", "segments", "neural"]
# (hypotheses, reference streams, the keys wanted) -> key -> per-segment scores; one call serves every
# metric that shares the function (ROUGE-1/2/L/Lsum are one rouge-score pass)
Segments = Callable[[Sequence[str], Sequence[Sequence[str]], Sequence[str]], dict[str, list[float]]]


@dataclass(frozen=True)
class Metric:
    """One quality metric and how seqlab computes, tests and shows it."""

    key: str  # its key in metrics.json, W&B and the tables (metrics.keys)
    title: str  # how tables and plots name it
    kind: Kind
    choice: str = ""  # the `metrics=[...]` value that computes it (default: its key)
    lower_is_better: bool = False  # an error score (TER, MetricX)
    default: bool = False  # computed by evaluate and tested by compare unless `metrics=` says otherwise
    paired: bool = True  # seqlab compare gives it intervals and paired tests
    column: float | None = None  # its place among the report's and dashboard's main columns; None: further ones
    bucketed: bool = False  # also scored on each source-length bucket (metrics.keys.LENGTH_BUCKETS)
    sacrebleu: tuple[str, dict[str, Any]] | None = None  # kind sacrebleu: sacreBLEU's class name and options
    segments: Segments | None = None  # kind segments: its per-segment scores
    extras: tuple[str, ...] = field(default=())  # further keys it reports (BERTScore's P and R)

    @property
    def chosen_by(self) -> str:
        return self.choice or self.key


METRICS: dict[str, Metric] = {}


def declare(metric: Metric) -> Metric:
    """Add `metric` to the declarations (a test's fixture metric the same way as seqlab's own)."""
    METRICS[metric.key] = metric
    return metric


def metric(key: str) -> Metric | None:
    return METRICS.get(key)


def of_kind(kind: Kind, keys: Sequence[str] | None = None) -> tuple[str, ...]:
    """The declared metrics of `kind` (among `keys` where given), in declaration order."""
    return tuple(k for k, m in METRICS.items() if m.kind == kind and (keys is None or k in keys))


def quality() -> tuple[str, ...]:
    """Every quality metric's key."""
    return tuple(METRICS)


def choices() -> tuple[str, ...]:
    """The `metrics=[...]` values, each once, in declaration order."""
    return tuple(dict.fromkeys(m.chosen_by for m in METRICS.values()))


def default_choices() -> tuple[str, ...]:
    """What evaluate computes unless told: the choices of the default metrics."""
    return tuple(dict.fromkeys(m.chosen_by for m in METRICS.values() if m.default))


def chosen_or_default(chosen: Sequence[str] | None) -> Sequence[str]:
    """The `metrics=[...]` values `chosen`, or without any the defaults."""
    return default_choices() if chosen is None else chosen


def computed_by(chosen: Sequence[str] | None) -> tuple[str, ...]:
    """The metrics the `metrics=[...]` values `chosen` (None: the defaults) compute."""
    chosen = chosen_or_default(chosen)
    return tuple(k for k, m in METRICS.items() if m.chosen_by in chosen)


def comparable() -> tuple[str, ...]:
    """What seqlab compare can test."""
    return tuple(k for k, m in METRICS.items() if m.paired)


def default_compared() -> tuple[str, ...]:
    """What seqlab compare tests unless told."""
    return tuple(k for k, m in METRICS.items() if m.paired and m.default)


def lower_is_better(key: str) -> bool:
    found = METRICS.get(key)
    return found is not None and found.lower_is_better


def lower_keys() -> frozenset[str]:
    return frozenset(k for k, m in METRICS.items() if m.lower_is_better)


def columns() -> tuple[str, ...]:
    """The report's and the dashboard's main metric columns, in order."""
    placed = sorted((m.column, k) for k, m in METRICS.items() if m.column is not None)
    return tuple(k for _, k in placed)


def further_columns() -> tuple[str, ...]:
    """The metrics the dashboard shows after the main columns."""
    return tuple(k for k, m in METRICS.items() if m.column is None)


def neural() -> tuple[str, ...]:
    """The metrics a model scores (seqlab.metrics.neural)."""
    return of_kind("neural")


def metric_of(key: str) -> str:
    """The neural metric a metrics.json key reports on (its score, interval, signature, or its further values:
    BERTScore's P and R), or the key itself: what a rescore with another model replaces."""
    for name in neural():
        if key in (name, K.ci(name), K.signature(name), *METRICS[name].extras):
            return name
    return key


def titles() -> dict[str, str]:
    return {k: m.title for k, m in METRICS.items()}


def bucketed() -> dict[str, str]:
    """The metrics scored per source-length bucket -> their titles."""
    return {k: m.title for k, m in METRICS.items() if m.bucketed}


def segment_scores(hyps: Sequence[str], refs: Sequence[Sequence[str]], keys: Sequence[str]
                   ) -> dict[str, list[float]]:
    """Per-segment scores of the `segments` metrics among `keys`, one call per scoring function."""
    wanted = of_kind("segments", keys)
    out: dict[str, list[float]] = {}
    for score in dict.fromkeys(METRICS[k].segments for k in wanted):
        served = [k for k in wanted if METRICS[k].segments is score]
        out.update({k: v for k, v in score(hyps, refs, served).items() if k in served})
    return out


def rouge(hyps: Sequence[str], refs: Sequence[Sequence[str]], keys: Sequence[str]) -> dict[str, list[float]]:
    return rouge_per_example(hyps, refs, keys)


for _key, _title, _options, _lower, _default, _column, _bucketed in (
        (K.BLEU, "BLEU", ("BLEU", {}), False, True, 0, True),
        (K.CHRF, "chrF", ("CHRF", {}), False, True, 1, True),
        # chrF++: sacrebleu -m chrf --chrf-word-order 2
        (K.CHRFPP, "chrF++", ("CHRF", {"word_order": 2}), False, False, 6, False),
        (K.TER, "TER", ("TER", {}), True, False, 7, False)):
    declare(Metric(_key, _title, "sacrebleu", lower_is_better=_lower, default=_default, column=_column,
                   bucketed=_bucketed, sacrebleu=_options))
# rouge-score's F1 x100 with stemming, the best reference per segment; `metrics=[rouge]` computes all four.
# ROUGE-Lsum (summary-level LCS over sentences) is reported, not tested
for _key, _title, _column, _paired in ((K.ROUGE1, "ROUGE-1", 8, True), (K.ROUGE2, "ROUGE-2", None, True),
                                      (K.ROUGEL, "ROUGE-L", 9, True), (K.ROUGELSUM, "ROUGE-Lsum", None, False)):
    declare(Metric(_key, _title, "segments", choice="rouge", default=True, column=_column, paired=_paired,
                   segments=rouge))
for _key, _title, _lower, _column, _extras in (
        (K.COMET, "COMET", False, 2, ()), (K.COMETKIWI, "CometKiwi", False, 3, ()),
        (K.BERTSCORE, "BERTScore", False, 4, (K.BERTSCORE_P, K.BERTSCORE_R)), (K.METRICX, "MetricX", True, 5, ())):
    declare(Metric(_key, _title, "neural", lower_is_better=_lower, column=_column, extras=_extras))
