"""Confidence intervals, paired tests and seed aggregation against independent computations."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from rouge_score import rouge_scorer, scoring
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from seqlab.analysis.compare import CompareError, System, compare, from_text_files
from seqlab.app.compare import main
from seqlab.metrics import intervals
from seqlab.metrics.seeds import compare as compare_seeds
from seqlab.metrics.seeds import permutation_p, summarize
from seqlab.metrics.significance import mean_interval, resample_indices, sacrebleu_seed

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "house", "red", "blue", "green", "tree", "ran", "fast", "slow"]


def corpus(n: int = 120, keep: float = 0.6, seed: int = 0,
           refs: list[str] | None = None) -> tuple[list[str], list[str]]:
    """References (random words, or the given ones) and a hypothesis keeping each word with probability `keep`."""
    rng = random.Random(seed)
    refs = refs or [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) for _ in range(n)]
    hyps = [" ".join(w if rng.random() < keep else rng.choice(WORDS) for w in r.split()) for r in refs]
    return refs, hyps


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    refs, base = corpus(keep=0.6, seed=1)
    _, better = corpus(keep=0.75, seed=2, refs=refs)
    _, ref2 = corpus(keep=0.8, seed=3, refs=refs)
    out = {}
    for name, lines in {"ref": refs, "ref2": ref2, "base": base, "better": better}.items():
        out[name] = tmp_path / f"{name}.txt"
        out[name].write_text("\n".join(lines) + "\n")
    return out


def test_compare_equals_sacrebleu_paired_test(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp.json"
    assert main(["--refs", str(files["ref"]), "--refs", str(files["ref2"]), "--hyps", str(files["base"]),
                 str(files["better"]), "--json", str(out), "--seed", "777", "--n-ar", "2000"]) == 0
    got = json.loads(out.read_text())
    refs = [files["ref"].read_text().splitlines(), files["ref2"].read_text().splitlines()]
    systems = [("base.txt", files["base"].read_text().splitlines()),
               ("better.txt", files["better"].read_text().splitlines())]
    with sacrebleu_seed(777):
        _, bs = PairedTest(systems, {"bleu": BLEU(), "chrf": CHRF()}, refs, test_type="bs", n_samples=1000)()
        _, ar = PairedTest(systems, {"bleu": BLEU(), "chrf": CHRF()}, refs, test_type="ar", n_samples=2000)()
    for metric, key in (("bleu", "BLEU"), ("chrf", "chrF2")):
        for i, system in enumerate(got["systems"]):
            r = bs[key][i]
            assert system["metrics"][metric]["score"] == pytest.approx(r.score, abs=1e-9)
            assert system["metrics"][metric]["ci"] == pytest.approx([r.mean - r.ci, r.mean + r.ci], abs=1e-4)
        (c,) = [c for c in got["comparisons"] if c["metric"] == metric]
        assert (c["base"], c["system"]) == ("base.txt", "better.txt")
        assert c["delta"] == pytest.approx(bs[key][1].score - bs[key][0].score)
        assert c["p_bootstrap"] == pytest.approx(bs[key][1].p_value)
        assert c["p_ar"] == pytest.approx(ar[key][1].p_value)
    assert {c["metric"] for c in got["comparisons"]} == {"bleu", "chrf", "rouge1", "rouge2", "rougeL"}
    assert all(c["p_ar"] is None for c in got["comparisons"] if c["metric"].startswith("rouge"))


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


def test_a_real_difference_is_significant(files: dict[str, Path]) -> None:
    report = compare(from_text_files([files["ref"]], [files["base"], files["better"]]), n_ar=500)
    assert sorted(c.metric for c in report.comparisons) == sorted(["bleu", "chrf", "rouge1", "rouge2", "rougeL"])
    assert all(c.delta > 0 and c.significant() for c in report.comparisons)


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


def test_cli_errors_are_messages_not_tracebacks(files: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    assert main(["--hyps", str(files["base"])]) == 2
    assert "--refs" in capsys.readouterr().err
    assert main([str(files["base"].parent)]) == 2
    assert "no hypotheses.jsonl" in capsys.readouterr().err


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


def test_compare_aggregates_result_folders_over_seeds(tmp_path: Path) -> None:
    refs, _ = corpus(n=40, seed=9)
    roots = []
    for variant, keep in (("base", 0.5), ("better", 0.9)):
        for seed in range(3):
            _, hyps = corpus(keep=keep, seed=100 + seed + (10 if variant == "better" else 0), refs=refs)
            folder = tmp_path / f"{variant}-seed{seed}" / "greedy-abc"
            folder.mkdir(parents=True)
            folder.joinpath("hypotheses.jsonl").write_text("".join(
                json.dumps({"id": str(i), "source": f"s{i}", "reference": r, "hypothesis": h}) + "\n"
                for i, (r, h) in enumerate(zip(refs, hyps, strict=True))))
            folder.joinpath("metrics.json").write_text(json.dumps(
                {"label": "greedy", "split": "test", "status": "ok",
                 "checkpoint": {"run_name": variant, "seed": seed, "variant": variant}}))
            roots.append(folder)
    out = tmp_path / "cmp.json"
    assert main([*map(str, roots), "--json", str(out), "--n-ar", "200"]) == 0
    got = json.loads(out.read_text())
    # each variant-seed run is compared with the baseline variant's run of the same seed
    pairs = {(c["base"], c["system"]) for c in got["comparisons"]}
    assert pairs == {(f"base-seed{s}/greedy", f"better-seed{s}/greedy") for s in range(3)}
    groups = {g["variant"]: g["metrics"]["bleu"] for g in got["seed_groups"]}
    per_seed = {s["name"]: s["metrics"]["bleu"]["score"] for s in got["systems"]}
    assert groups["base/greedy"]["values"] == {str(s): per_seed[f"base-seed{s}/greedy"] for s in range(3)}
    assert groups["better/greedy"]["mean"] == pytest.approx(np.mean([per_seed[f"better-seed{s}/greedy"]
                                                                      for s in range(3)]))
    (bleu_cmp,) = [c for c in got["seed_comparisons"] if c["metric"] == "bleu"]
    assert bleu_cmp["delta"] > 0 and bleu_cmp["exceeds_spread"]


def test_intervals_survive_resamples_that_score_zero() -> None:
    refs = ["a b c d", "e f g h", "i j k l"]
    hyps = ["a b c d", "x y z w", "q r s t"]  # most resamples have no 4-gram match: BLEU 0
    iv = intervals(hyps, refs, n=200)["bleu"]
    assert iv.low <= iv.high  # sacreBLEU's mean +- half-width (it can dip below 0 on 3 segments)
