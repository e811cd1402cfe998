"""Confidence intervals, paired tests and seed aggregation against independent computations."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from rouge_score import rouge_scorer, scoring
from sacrebleu.metrics import BLEU

from seqlab.analysis.compare import CompareError, System, compare, from_text_files
from seqlab.metrics import intervals
from seqlab.metrics.seeds import compare as compare_seeds
from seqlab.metrics.seeds import permutation_p, summarize
from seqlab.metrics.significance import mean_interval, resample_indices
from tests.helpers import corpus, text_systems


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return text_systems(tmp_path)


def test_rouge_interval_equals_rouge_score_bootstrap_aggregator() -> None:
    refs, hyps = corpus(n=80)
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    scores = [scorer.score(r, h) for r, h in zip(refs, hyps, strict=True)]
    ours = intervals(hyps, refs, seed=42, n=300)
    for name in ("rouge1", "rouge2", "rougeL"):
        aggregator = scoring.BootstrapAggregator(n_samples=300)
        for s in scores:
            aggregator.add_scores({name: s[name]})
        np.random.seed(42)  # rouge-score draws from the global RNG
        expected = aggregator.aggregate()
        assert ours[name].low == pytest.approx(100 * expected[name].low.fmeasure, abs=1e-9)
        assert ours[name].high == pytest.approx(100 * expected[name].high.fmeasure, abs=1e-9)
        assert ours[name].low <= ours[name].score <= ours[name].high


def test_intervals_are_seeded_and_contain_the_score() -> None:
    refs, hyps = corpus()
    a, b, c = intervals(hyps, refs, seed=5), intervals(hyps, refs, seed=5), intervals(hyps, refs, seed=6)
    assert a == b
    assert a["bleu"] != c["bleu"]
    bleu = BLEU().corpus_score(hyps, [refs]).score
    assert a["bleu"].score == pytest.approx(bleu) and a["bleu"].low < bleu < a["bleu"].high


def test_identical_systems_are_never_significantly_different(files: dict[str, Path]) -> None:
    copy = files["base"].with_name("copy.txt")
    copy.write_text(files["base"].read_text())
    systems = from_text_files([files["ref"]], [files["base"], copy])
    report = compare(systems, n_ar=500)
    assert len(report.comparisons) == 5
    for c in report.comparisons:
        assert c.delta == 0 and c.p_bootstrap == 1.0 and c.p_ar in (1.0, None) and not c.significant()


def test_a_real_difference_is_significant(files: dict[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        report = compare(from_text_files([files["ref"]], [files["base"], files["better"]]), n_ar=500)
    assert not [r for r in caplog.records if r.name == "sacrebleu"]  # its step-by-step INFO lines stay out
    assert sorted(c.metric for c in report.comparisons) == sorted(["bleu", "chrf", "rouge1", "rouge2", "rougeL"])
    assert all(c.delta > 0 and c.significant() for c in report.comparisons)


def test_a_subset_of_metrics_gives_the_full_comparisons_figures(files: dict[str, Path]) -> None:
    """The study's docs test BLEU alone: its intervals and bootstrap p equal those of the full comparison
    (sacreBLEU draws one set of resamples per test, whatever else it tests); n_ar=0 leaves out AR."""
    systems = from_text_files([files["ref"]], [files["base"], files["better"]])
    full = compare(systems, n_ar=200)
    for metrics in (("bleu",), ("rougeL",), ("chrf", "rouge2")):
        part = compare(systems, n_ar=0, metrics=metrics)
        assert sorted(c.metric for c in part.comparisons) == sorted(metrics)
        for c in part.comparisons:
            (same,) = [f for f in full.comparisons if f.metric == c.metric]
            assert (c.delta, c.p_bootstrap, c.p_ar) == (same.delta, same.p_bootstrap, None)
        assert {n: set(v) for n, v in part.intervals.items()} == {s.name: set(metrics) for s in systems}
        assert all(part.intervals[n][m] == full.intervals[n][m] for n in part.intervals for m in metrics)
    with pytest.raises(CompareError, match=r"metrics \['bleurt'\]"):
        compare(systems, metrics=("bleu", "bleurt"))


def test_refuses_systems_of_different_length_naming_both(files: dict[str, Path]) -> None:
    short = files["base"].with_name("short.txt")
    short.write_text("\n".join(files["base"].read_text().splitlines()[:-3]) + "\n")
    with pytest.raises(CompareError, match=r"short\.txt.*base\.txt"):
        compare(from_text_files([files["ref"]], [files["base"], short]))
    bad_ref = files["ref"].with_name("badref.txt")
    bad_ref.write_text("one line\n")
    with pytest.raises(CompareError, match=r"ref\.txt.*badref\.txt"):
        from_text_files([files["ref"], bad_ref], [files["base"]])


def test_refuses_different_sources_or_references() -> None:
    refs, hyps = corpus(n=10)
    a = System("a", hyps, [refs], sources=["s"] * 10, origin="runA")
    b = System("b", hyps, [refs], sources=["s"] * 9 + ["other"], origin="runB")
    with pytest.raises(CompareError, match=r"runB and runA translate different sources \(first at segment 10\)"):
        compare([a, b])
    c = System("c", hyps, [refs[:-1] + ["x"]], sources=["s"] * 10, origin="runC")
    with pytest.raises(CompareError, match="runC and runA are scored against different references"):
        compare([a, c])


def test_paired_rouge_bootstrap_by_hand() -> None:
    a, b = [10.0, 20.0, 30.0, 40.0], [12.0, 21.0, 35.0, 41.0]
    idx = resample_indices(4, seed=3, n=50)
    from seqlab.metrics.significance import paired_bootstrap_p

    observed = abs(np.mean(a) - np.mean(b))
    diffs = [abs(np.mean([b[i] for i in row]) - np.mean([a[i] for i in row])) for row in idx]
    centred = [d - np.mean(diffs) for d in diffs]
    assert paired_bootstrap_p(a, b, idx) == pytest.approx((sum(c > observed for c in centred) + 1) / 51)
    means = sorted(np.mean([a[i] for i in row]) for row in idx)
    iv = mean_interval(a, idx)
    assert iv.score == 25.0 and iv.low == pytest.approx(np.percentile(means, 2.5))


def test_seed_aggregation_on_known_values() -> None:
    base = summarize({0: 20.0, 1: 21.0, 2: 22.0})
    assert base.mean == 21.0 and base.sd == pytest.approx(1.0)
    far = compare_seeds(base, summarize({0: 30.0, 1: 31.0, 2: 32.0}))
    assert far.delta == 10.0 and far.pooled_sd == pytest.approx(1.0) and far.exceeds_spread
    assert far.p_permutation == pytest.approx(2 / 20)  # complete separation, either direction: 2 of 20 splits
    near = compare_seeds(base, summarize({0: 20.5, 1: 21.5, 2: 22.5}))
    assert not near.exceeds_spread and near.p_permutation > 0.5
    assert permutation_p([1.0, 2.0], [1.0, 2.0]) == 1.0
    assert summarize({3: 5.0}).sd == 0.0


def test_intervals_survive_resamples_that_score_zero() -> None:
    refs = ["a b c d", "e f g h", "i j k l"]
    hyps = ["a b c d", "x y z w", "q r s t"]  # most resamples have no 4-gram match: BLEU 0
    iv = intervals(hyps, refs, n=200)["bleu"]
    assert iv.low <= iv.high  # sacreBLEU's mean +- half-width (it can dip below 0 on 3 segments)


def test_ter_and_chrfpp_paired_tests_equal_sacrebleus_and_ter_improves_downwards(files: dict[str, Path]) -> None:
    """TER and chrF++ through sacreBLEU's PairedTest, run here directly; a better system lowers TER, and
    the comparison says so."""
    from sacrebleu.metrics import CHRF, TER
    from sacrebleu.significance import PairedTest

    from seqlab.analysis.compare import significance_table
    from seqlab.metrics.significance import sacrebleu_seed

    systems = from_text_files([files["ref"]], [files["base"], files["better"]])
    report = compare(systems, n_ar=300, metrics=("ter", "chrfpp"))
    named = [(s.name, s.hypotheses) for s in systems]
    with sacrebleu_seed(12345):
        _, bs = PairedTest(named, {"ter": TER(), "chrfpp": CHRF(word_order=2)}, systems[0].references,
                           test_type="bs", n_samples=1000)()
        _, ar = PairedTest(named, {"ter": TER(), "chrfpp": CHRF(word_order=2)}, systems[0].references,
                           test_type="ar", n_samples=300)()
    by_metric = {c.metric: c for c in report.comparisons}
    assert by_metric["ter"].p_bootstrap == pytest.approx(bs["TER"][1].p_value)
    assert by_metric["ter"].p_ar == pytest.approx(ar["TER"][1].p_value)
    assert by_metric["chrfpp"].p_bootstrap == pytest.approx(bs["chrF2++"][1].p_value)
    assert by_metric["ter"].delta < 0 and by_metric["ter"].improves and by_metric["ter"].significant()
    assert by_metric["chrfpp"].delta > 0 and by_metric["chrfpp"].improves
    iv = report.intervals[systems[0].name]["ter"]
    assert iv.score == pytest.approx(TER().corpus_score(systems[0].hypotheses, systems[0].references).score)
    table = significance_table(report, systems)
    assert "ter: lower is better" in table and "bleu" not in table


def test_remembered_statistics_give_sacrebleus_own_paired_test_numbers(files: dict[str, Path]) -> None:
    """A page tests one baseline against many systems, so each system's statistics are extracted once per
    process; the second, remembered comparison gives exactly what sacreBLEU's PairedTest gives afresh."""
    from sacrebleu.metrics import CHRF
    from sacrebleu.significance import PairedTest

    from seqlab.metrics.significance import _segment_statistics, sacrebleu_seed

    systems = from_text_files([files["ref"]], [files["base"], files["better"]])
    _segment_statistics.cache_clear()
    first = compare(systems, n_ar=200, metrics=("bleu", "chrf"))
    again = compare(systems, n_ar=200, metrics=("bleu", "chrf"))
    assert _segment_statistics.cache_info().hits >= 4  # both systems, both metrics, the second time
    named = [(s.name, s.hypotheses) for s in systems]
    with sacrebleu_seed(12345):
        _, bs = PairedTest(named, {"bleu": BLEU(), "chrf": CHRF()}, systems[0].references, test_type="bs",
                           n_samples=1000)()
        _, ar = PairedTest(named, {"bleu": BLEU(), "chrf": CHRF()}, systems[0].references, test_type="ar",
                           n_samples=200)()
    for report in (first, again):
        by_metric = {c.metric: c for c in report.comparisons}
        for metric, key in (("bleu", "BLEU"), ("chrf", "chrF2")):
            assert by_metric[metric].p_bootstrap == bs[key][1].p_value
            assert by_metric[metric].p_ar == ar[key][1].p_value
            for i, s in enumerate(systems):
                iv = report.intervals[s.name][metric]
                assert (iv.score, iv.low, iv.high) == (bs[key][i].score, bs[key][i].mean - bs[key][i].ci,
                                                       bs[key][i].mean + bs[key][i].ci)
