"""docs/ARCHITECTURE.md's row for a metric, checked: a metric added the way it says (its scoring function and one
declaration in metrics.declarations, nothing else) is a `metrics=[...]` choice, is computed with its interval,
is tested by seqlab compare against an independent paired bootstrap, and is shown by the report, the dashboard
and W&B's summaries in its declared place and direction."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from seqlab.analysis.compare import System, compare
from seqlab.metrics import declarations as M
from seqlab.metrics.significance import paired_bootstrap_p, resample_indices
from seqlab.metrics.text import check_metrics, intervals, segment_means
from seqlab.tracking.dashboard import table_metrics
from seqlab.tracking.report import markdown_table
from seqlab.tracking.wandb import summaries


def exact_match(hyps: Sequence[str], refs: Sequence[Sequence[str]], keys: Sequence[str]) -> dict[str, list[float]]:
    """100 where the hypothesis equals one of its references, else 0: the fixture metric's segments."""
    scores = [100.0 * any(h == stream[i] for stream in refs) for i, h in enumerate(hyps)]
    return {key: scores for key in keys}


EXACT = M.Metric("exact", "Exact match", "segments", column=1.5, segments=exact_match)
REFS = [["a b c", "d e", "f g h", "i", "j k", "l m n", "o", "p q"]]
BASE = ["a b c", "d x", "f g h", "y", "j k", "l m", "o", "z"]  # 4 of 8 exact
BETTER = ["a b c", "d e", "f g h", "i", "j k", "l m n", "o", "z"]  # 7 of 8


@pytest.fixture
def exact(monkeypatch):
    monkeypatch.setitem(M.METRICS, "exact", EXACT)


def test_the_declared_metric_is_a_choice_and_is_computed_with_its_interval(exact):
    assert "exact" in M.choices() and check_metrics(["bleu", "exact"]) == ("bleu", "exact")
    assert "exact" not in M.default_choices()
    assert segment_means(BASE, REFS, ["exact"]) == {"exact": 50.0}
    interval = intervals(BASE, REFS, n=200, metrics=["exact"])["exact"]
    assert interval.score == 50.0 and interval.low < 50.0 < interval.high


def test_compare_tests_it_against_an_independent_paired_bootstrap(exact):
    systems = [System("base", BASE, REFS), System("better", BETTER, REFS)]
    report = compare(systems, seed=7, n_bootstrap=300, n_ar=0, metrics=["bleu", "exact"])
    found = next(c for c in report.comparisons if c.metric == "exact")
    assert found.delta == pytest.approx(37.5) and found.improves
    idx = resample_indices(len(BASE), 7, 300)
    a, b = np.array([100.0 * (h == r) for h, r in zip(BASE, REFS[0], strict=True)]), \
        np.array([100.0 * (h == r) for h, r in zip(BETTER, REFS[0], strict=True)])
    assert found.p_bootstrap == paired_bootstrap_p(a, b, idx)


def test_the_report_dashboard_and_wandb_show_it_where_declared(exact):
    assert table_metrics()[:3] == ("bleu", "chrf", "exact")  # column 1.5: between chrF and COMET
    assert ("test/exact", "max") in summaries()
    result = {"status": "ok", "label": "greedy", "decoding": {"method": "greedy"},
              "metrics": {"bleu": 30.0, "exact": 50.0, "exact_ci": [40.0, 60.0]}}
    head, _, row = markdown_table([result]).split("\n")
    assert "exact [95% CI]" in head and "50.00 [40.00, 60.00]" in row


def test_an_error_score_is_minimized_and_improves_downwards(monkeypatch):
    monkeypatch.setitem(M.METRICS, "misses", M.Metric("misses", "Misses", "segments", lower_is_better=True,
                                                      segments=exact_match))
    assert ("validation/misses", "min") in summaries() and M.lower_is_better("misses")
    assert "misses" in M.further_columns()
