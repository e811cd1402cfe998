"""Confidence intervals and paired significance tests, through the libraries that define them.

BLEU and chrF use sacreBLEU's own machinery: `corpus_score(..., n_bootstrap=N)` for a
system's interval and `PairedTest` (paired bootstrap resampling, Koehn 2004, and
approximate randomization, Riezler & Maxwell 2005) for comparisons. sacreBLEU reports
an interval as `mean +- ci`, where `mean` is the bootstrap mean and `ci` half the
distance between the 2.5th and 97.5th percentiles of the resampled scores; `ci` below
is `[mean - ci, mean + ci]`, the numbers `sacrebleu --confidence` prints. Its RNG is
seeded from the SACREBLEU_SEED environment variable (default 12345), which
`sacrebleu_seed` sets for the duration of a call.

ROUGE is a mean of per-example F1 scores, so its interval is rouge-score's
`BootstrapAggregator`'s: the 2.5th and 97.5th percentiles of the means of N resamples
of the examples, drawn exactly as rouge-score draws them (`np.random.choice` per
resample) but from a seeded `RandomState` instead of the global one. ROUGE's paired
test follows sacreBLEU's paired bootstrap on those same resamples: the p-value is the
share of resampled |differences|, re-centred on their mean, that exceed the observed
|difference| (with the +1 correction).

One correction to sacreBLEU, applied to both tests: it counts resampled statistics
strictly greater than the observed one, so a zero observed difference (identical
systems, or identical scores) gets p = 1/(N+1) and would be called significant. A
zero difference is reported with p = 1: there is no difference to explain.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from seqlab.metrics import declarations as M
from seqlab.metrics import keys as K

SACREBLEU_DEFAULT_SEED = 12345
N_BOOTSTRAP = 1000
N_AR = 10000  # approximate randomization trials: the default of every paired test
N_AR_FAST = 1000  # where a page tests many pairs at once (the dashboard, the report's marks), which says so


@dataclass(frozen=True)
class Interval:
    """A corpus score and its 95% bootstrap confidence interval."""

    score: float
    low: float
    high: float

    def to_dict(self) -> dict[str, float | list[float]]:
        return {"score": self.score, "ci": [self.low, self.high]}


@dataclass(frozen=True)
class Comparison:
    """One system against the baseline on one metric."""

    base: str
    system: str
    metric: str
    delta: float  # system - base
    p_bootstrap: float
    p_ar: float | None  # approximate randomization (sacreBLEU's metrics); None for ROUGE

    @property
    def improves(self) -> bool:
        """Whether the system scores better than the base (a lower TER, a higher anything else)."""
        return self.delta < 0 if M.lower_is_better(self.metric) else self.delta > 0

    def significant(self, alpha: float = 0.05) -> bool:
        return self.p_bootstrap < alpha and (self.p_ar is None or self.p_ar < alpha)


@contextmanager
def sacrebleu_seed(seed: int) -> Iterator[None]:
    """sacreBLEU reads its resampling seed from the environment; set it for this block only."""
    previous = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = previous


@contextmanager
def sacrebleu_quiet() -> Iterator[None]:
    """sacreBLEU logs every step of a paired test at INFO (two lines per system and metric); keep its log
    to warnings for this block, so that a command's own log stays readable."""
    logger = logging.getLogger("sacrebleu")
    previous = logger.level
    logger.setLevel(max(previous, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(previous)


def sacrebleu_metric(name: str, references: Sequence[Sequence[str]] | None = None):  # noqa: ANN201  (a Metric)
    """sacreBLEU's metric object for a seqlab metric name, as its declaration names it, with sacreBLEU's
    defaults (chrF++: word_order=2, as `sacrebleu -m chrf --chrf-word-order 2`; TER: tercom tokenization,
    case-insensitive); `references`, if given, held in its own reference cache."""
    import sacrebleu.metrics

    declared = M.metric(name)
    if declared is None or declared.sacrebleu is None:
        raise ValueError(f"{name} is not a sacreBLEU metric; those are {', '.join(M.of_kind('sacrebleu'))}")
    kind, options = declared.sacrebleu
    return getattr(sacrebleu.metrics, kind)(**options, references=references)


@functools.lru_cache(maxsize=16)
def _with_references(name: str, refs: tuple[tuple[str, ...], ...]):  # noqa: ANN202  (a sacrebleu Metric)
    """The metric holding these references' n-grams, once per process."""
    return sacrebleu_metric(name, [list(r) for r in refs])


@functools.lru_cache(maxsize=256)
def _segment_statistics(name: str, hyps: tuple[str, ...], refs: tuple[tuple[str, ...], ...]) -> tuple:
    """sacreBLEU's sufficient statistics of one system (and its metric's reference count), once per process:
    a page of comparisons tests one baseline against many systems, and sacreBLEU tokenizes the references and
    the baseline again in every test (most of a paired test's time). The statistics are read, never written."""
    metric = _with_references(name, refs)
    return metric._extract_corpus_statistics(list(hyps), None), metric.num_refs


def remembering(name: str):  # noqa: ANN201  (a sacrebleu Metric)
    """`sacrebleu_metric(name)` whose corpus statistics come from `_segment_statistics`: the same numbers,
    computed once for each system and references."""
    metric = sacrebleu_metric(name)

    def statistics(hyps: Sequence[str], refs: Sequence[Sequence[str]]):  # noqa: ANN202
        stats, metric.num_refs = _segment_statistics(name, tuple(hyps), tuple(tuple(r) for r in refs))
        return stats

    metric._extract_corpus_statistics = statistics
    return metric


def sacrebleu_interval(name: str, hyps: Sequence[str], refs: Sequence[Sequence[str]],
                       seed: int = SACREBLEU_DEFAULT_SEED, n: int = N_BOOTSTRAP) -> Interval:
    """A sacreBLEU metric (BLEU, chrF, chrF++, TER) with sacreBLEU's bootstrap interval; `refs` is a list of
    reference streams.

    The steps of `corpus_score(..., n_bootstrap=n)`, as `PairedTest` runs them for its
    baseline, but with sacreBLEU's numpy `estimate_ci`: `Score.estimate_ci` fails with
    "can't coerce float and float32" when some resamples score exactly 0.
    """
    from sacrebleu.significance import _bootstrap_resample, estimate_ci

    metric = sacrebleu_metric(name)
    stats = metric._extract_corpus_statistics(list(hyps), [list(r) for r in refs])
    score = float(metric._aggregate_and_compute(stats).score)
    with sacrebleu_seed(seed):
        _, resampled = _bootstrap_resample(stats, metric, n)
    mean, half = estimate_ci(np.array([float(s.score) for s in resampled]))
    return Interval(score, float(mean - half), float(mean + half))


def resample_indices(n_examples: int, seed: int = SACREBLEU_DEFAULT_SEED, n: int = N_BOOTSTRAP) -> np.ndarray:
    """(n, n_examples) example indices, drawn as rouge-score's BootstrapAggregator draws them."""
    rng = np.random.RandomState(seed)
    return np.stack([rng.choice(np.arange(n_examples), size=n_examples) for _ in range(n)])


def mean_interval(values: Sequence[float], idx: np.ndarray) -> Interval:
    """Mean of per-example values, with the 2.5/97.5 percentiles of its resampled means."""
    array = np.asarray(values, dtype=np.float64)
    means = array[idx].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return Interval(float(array.mean()), float(low), float(high))


def paired_bootstrap_p(base: Sequence[float], system: Sequence[float], idx: np.ndarray) -> float:
    """sacreBLEU's paired bootstrap p-value for a mean of per-example scores."""
    a, b = np.asarray(base, dtype=np.float64), np.asarray(system, dtype=np.float64)
    observed = abs(a.mean() - b.mean())
    if observed == 0:
        return 1.0
    sample_diffs = np.abs(b[idx].mean(axis=1) - a[idx].mean(axis=1))
    centred = sample_diffs - sample_diffs.mean()
    return float((np.sum(centred > observed) + 1) / (len(centred) + 1))


def paired_ar_p(base: Sequence[float], system: Sequence[float], seed: int = SACREBLEU_DEFAULT_SEED,
                n: int = N_AR) -> float:
    """sacreBLEU's approximate randomization p-value (its _paired_ar_test: each segment's two scores swapped
    with probability 1/2 per trial, p = (trials with a larger |difference| + 1) / (trials + 1)) for a mean of
    per-example scores."""
    a, b = np.asarray(base, dtype=np.float64), np.asarray(system, dtype=np.float64)
    observed = abs(a.mean() - b.mean())
    if observed == 0:
        return 1.0
    keep = np.random.default_rng(seed).integers(2, size=(n, len(a)), dtype=bool)  # (trials, examples)
    shuffled_a = np.where(keep, a, b).mean(axis=1)
    shuffled_b = np.where(keep, b, a).mean(axis=1)
    return float((np.sum(np.abs(shuffled_a - shuffled_b) > observed) + 1) / (n + 1))


def sacrebleu_paired(systems: Sequence[tuple[str, Sequence[str]]], refs: Sequence[Sequence[str]],
                     seed: int = SACREBLEU_DEFAULT_SEED, n_bootstrap: int = N_BOOTSTRAP,
                     n_ar: int = N_AR, metrics: Sequence[str] = (K.BLEU, K.CHRF),
                     ) -> tuple[dict[str, dict[str, Interval]], list[Comparison]]:
    """Intervals of every system and comparisons with the first, for `metrics` (BLEU and chrF by default), by
    `PairedTest`; n_ar=0 leaves out the approximate randomization test (p_ar None). A metric's bootstrap
    does not depend on which other metrics are tested: sacreBLEU draws one set of resamples per test."""
    from sacrebleu.significance import PairedTest

    names = [name for name, _ in systems]
    named = [(name, list(hyps)) for name, hyps in systems]
    streams = [list(r) for r in refs]
    with sacrebleu_seed(seed), sacrebleu_quiet():
        _, bs = PairedTest(named, {m: remembering(m) for m in metrics}, streams, test_type="bs",
                           n_samples=n_bootstrap)()
        ar = PairedTest(named, {m: remembering(m) for m in metrics}, streams, test_type="ar",
                        n_samples=n_ar)()[1] if len(systems) > 1 and n_ar else {}
    intervals: dict[str, dict[str, Interval]] = {name: {} for name in names}
    comparisons = []
    for metric, (bs_key, bs_results) in zip(metrics, [(k, v) for k, v in bs.items() if k != "System"], strict=True):
        base_score = bs_results[0].score
        for i, (name, result) in enumerate(zip(names, bs_results, strict=True)):
            intervals[name][metric] = Interval(float(result.score), float(result.mean - result.ci),
                                               float(result.mean + result.ci))
            if i:
                delta = float(result.score - base_score)
                p_bs = float(result.p_value) if delta != 0 else 1.0
                p_ar = (float(ar[bs_key][i].p_value) if delta != 0 else 1.0) if ar else None
                comparisons.append(Comparison(names[0], name, metric, delta, p_bs, p_ar))
    return intervals, comparisons
