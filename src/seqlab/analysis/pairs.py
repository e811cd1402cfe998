"""Paired tests and differing examples between runs of one test set, for the report's "compare two runs" view.

Every pair is tested when at most `ALL_PAIRS_LIMIT` runs share a test set; with more, each run is tested
against the test set's baseline (its first run) only, and the report says which. BLEU and chrF by
sacreBLEU's paired bootstrap (1,000 resamples) and approximate randomization; ROUGE-L by the paired
bootstrap over examples (seqlab.metrics.significance), and each neural metric both runs recorded by both tests
on its segment scores, as `seqlab compare` computes them. For each tested
pair, the examples where the two outputs differ most (sentence chrF) come along, so the report can show
them without carrying every hypothesis.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from seqlab.analysis.compare import CompareError, System, check_comparable, compare, from_result_dir
from seqlab.metrics import declarations as M
from seqlab.metrics import keys as K
from seqlab.metrics.rouge import rouge_per_example
from seqlab.metrics.significance import (
    N_AR_FAST,
    N_BOOTSTRAP,
    SACREBLEU_DEFAULT_SEED,
    paired_ar_p,
    paired_bootstrap_p,
    resample_indices,
    sacrebleu_paired,
)
from seqlab.tracking.dashboard import run_id
from seqlab.tracking.examples import test_set_of
from seqlab.tracking.results import OK

log = logging.getLogger(__name__)

ALL_PAIRS_LIMIT = 12  # runs of one test set up to which every pair is tested
EXAMPLES_PER_PAIR = 5


@dataclass
class PairExample:
    """One source where two runs' outputs differ most, with each output's sentence chrF."""

    id: int
    source: str
    reference: str
    a: str
    b: str
    chrf_a: float
    chrf_b: float


@dataclass
class PairTest:
    """Run b against run a on one metric: b's score minus a's, and the p-values (p_ar: BLEU and chrF only)."""

    a: str
    b: str
    metric: str
    delta: float
    p_bootstrap: float
    p_ar: float | None


@dataclass
class PairedRuns:
    """What was tested among the runs of one test set: every pair, or each run against the baseline."""

    runs: list[str]
    mode: str  # "all" | "baseline"
    baseline: str
    tests: list[PairTest] = field(default_factory=list)
    examples: dict[str, list[PairExample]] = field(default_factory=dict)  # "a|b" -> examples
    n_bootstrap: int = N_BOOTSTRAP  # the tests' resamples and trials, which the page states
    n_ar: int = N_AR_FAST

    def to_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "mode": self.mode, "baseline": self.baseline, "n_bootstrap": self.n_bootstrap,
                "n_ar": self.n_ar,
                "tests": [asdict(t) for t in self.tests],
                "examples": {k: [asdict(e) for e in v] for k, v in self.examples.items()}}


def pairs_to_test(names: Sequence[str], limit: int = ALL_PAIRS_LIMIT) -> tuple[str, list[tuple[str, str]]]:
    """("all", every (a, b) with a before b) for at most `limit` runs, else ("baseline", (first, each other))."""
    if len(names) <= limit:
        return "all", [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    return "baseline", [(names[0], b) for b in names[1:]]


def pair_tests(systems: Sequence[System], limit: int = ALL_PAIRS_LIMIT, n_ar: int = N_AR_FAST,
                   seed: int = SACREBLEU_DEFAULT_SEED) -> PairedRuns:
    """Paired tests and differing examples among `systems`, all outputs for one test set (the first: the
    baseline)."""
    from sacrebleu.metrics import CHRF

    for other in systems[1:]:
        check_comparable(systems[0], other)
    names = [s.name for s in systems]
    mode, pairs = pairs_to_test(names, limit)
    out = PairedRuns(names, mode, names[0], n_ar=n_ar)
    by_name = {s.name: s for s in systems}
    refs = systems[0].references
    idx = resample_indices(len(systems[0].hypotheses), seed)
    rouge = {s.name: rouge_per_example(s.hypotheses, refs, (K.ROUGEL,))[K.ROUGEL] for s in systems}
    chrf = CHRF()
    sentence = {s.name: [chrf.sentence_score(h, [stream[i] for stream in refs]).score
                         for i, h in enumerate(s.hypotheses)] for s in systems}
    for a in dict.fromkeys(a for a, _ in pairs):
        others = [b for aa, b in pairs if aa == a]
        _, comparisons = sacrebleu_paired([(n, by_name[n].hypotheses) for n in (a, *others)], refs, seed, n_ar=n_ar)
        out.tests += [PairTest(c.base, c.system, c.metric, c.delta, c.p_bootstrap, c.p_ar) for c in comparisons]
        for b in others:
            delta = sum(rouge[b]) / len(rouge[b]) - sum(rouge[a]) / len(rouge[a])
            out.tests.append(PairTest(a, b, K.ROUGEL, delta, paired_bootstrap_p(rouge[a], rouge[b], idx), None))
            out.tests += neural_tests(by_name[a], by_name[b], idx, seed, n_ar)
            out.examples[f"{a}|{b}"] = differing(by_name[a], by_name[b], sentence[a], sentence[b])
    return out


def neural_tests(a: System, b: System, idx: np.ndarray, seed: int, n_ar: int) -> list[PairTest]:
    """Each neural metric both runs recorded: paired bootstrap and approximate randomization on its segment
    scores."""
    out = []
    for metric in (m for m in M.neural() if m in a.segment_scores and m in b.segment_scores):
        x, y = a.segment_scores[metric], b.segment_scores[metric]
        out.append(PairTest(a.name, b.name, metric, sum(y) / len(y) - sum(x) / len(x),
                            paired_bootstrap_p(x, y, idx), paired_ar_p(x, y, seed, n_ar)))
    return out


def differing(a: System, b: System, chrf_a: list[float], chrf_b: list[float],
              n: int = EXAMPLES_PER_PAIR) -> list[PairExample]:
    """The n examples whose outputs differ most between a and b: the largest sentence-chrF gap among those
    whose outputs are not equal."""
    order = sorted((i for i in range(len(a.hypotheses)) if a.hypotheses[i] != b.hypotheses[i]),
                   key=lambda i: (-abs(chrf_a[i] - chrf_b[i]), i))[:n]
    return [PairExample(i, a.sources[i] if a.sources else "", a.references[0][i], a.hypotheses[i], b.hypotheses[i],
                        round(chrf_a[i], 2), round(chrf_b[i], 2)) for i in order]


def by_test_set(results: list[dict[str, Any]]) -> list[list[int]]:
    """The finished results' indices grouped by test set, each group greedy first, then by result path."""
    groups: dict[str, list[int]] = {}
    order = sorted(range(len(results)), key=lambda i: (results[i].get("decoding", {}).get("method") != "greedy",
                                                       str(results[i].get("_path"))))
    for i in order:
        if results[i].get("status") == OK:
            groups.setdefault(test_set_of(results[i]), []).append(i)
    return list(groups.values())


def significance_marks(results: list[dict[str, Any]], limit: int = 40) -> dict[str, str]:
    """For each test set evaluated by several settings (at most `limit`), BLEU of each against the first
    (greedy first): "+1.23 (p 0.001/0.001) *", the paired bootstrap's and approximate randomization's
    p-values, * where both are < 0.05."""
    marks: dict[str, str] = {}
    for members in by_test_set(results):
        group = [results[i] for i in members]
        if not 2 <= len(group) <= limit:
            continue
        try:
            systems = [from_result_dir(Path(r["_path"])) for r in group]
            report = compare(systems, n_ar=N_AR_FAST)
        except CompareError as err:
            log.warning("no significance marks for one test set: %s", err)
            continue
        by_name = {c.system: c for c in report.comparisons if c.metric == K.BLEU}
        marks[group[0]["_path"]] = "baseline"
        for r, s in zip(group[1:], systems[1:], strict=True):
            c = by_name.get(s.name)  # None: the baseline of its own seed
            marks[r["_path"]] = "baseline" if c is None else (
                f"{c.delta:+.2f} (p {c.p_bootstrap:.3f}/{c.p_ar:.3f})" + (" *" if c.significant() else ""))
    return marks


def report_pairs(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The paired tests and differing examples among the finished runs of each test set (seqlab.analysis.pairs),
    runs named by their id on the page; the greedy run first, as the baseline."""
    out = []
    for members in by_test_set(results):
        if len(members) < 2:
            continue
        try:
            systems = [replace(from_result_dir(Path(results[i]["_path"])), name=run_id(i)) for i in members]
            out.append(pair_tests(systems).to_dict())
        except CompareError as err:
            log.warning("no paired tests for one test set: %s", err)
    return out
