"""Neural metrics in seqlab compare and the report's paired tests: read from the result folders' segment
scores (compare runs no model), each with its interval, the paired bootstrap and approximate randomization
(checked against a plain loop of sacreBLEU's rule), MetricX lower-is-better, and a system without the
scores refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from seqlab.analysis.compare import (
    CompareError,
    compare,
    from_result_dir,
    recorded_neural,
    significance_table,
)
from seqlab.analysis.pairs import pair_tests
from seqlab.metrics import declarations as M
from seqlab.metrics.significance import paired_ar_p

SOURCES = [f"source {i}" for i in range(40)]
REFS = [f"the reference of {i}" for i in range(40)]


def result_folder(root: Path, name: str, shift: float, metrics=("comet", "metricx")) -> Path:
    rng = np.random.default_rng(len(name))
    folder = root / name
    folder.mkdir(parents=True)
    lines = []
    for i, (src, ref) in enumerate(zip(SOURCES, REFS, strict=True)):
        scores = {"comet": 60 + shift + float(rng.normal(0, 5)), "metricx": 5 - shift / 10 + float(rng.normal(0, 1))}
        lines.append(json.dumps({"id": str(i), "source": src, "reference": ref, "hypothesis": f"{name} {i}",
                                 "segment_scores": {m: scores[m] for m in metrics}}))
    (folder / "hypotheses.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "metrics.json").write_text(json.dumps({"status": "ok", "label": name, "metrics": {}}))
    return folder


def ar_loop(a, b, seed, n):
    """sacreBLEU's approximate randomization, one trial at a time."""
    keep = np.random.default_rng(seed).integers(2, size=(n, len(a)), dtype=bool)
    observed, count = abs(np.mean(a) - np.mean(b)), 0
    for row in keep:
        x = [ai if k else bi for ai, bi, k in zip(a, b, row, strict=True)]
        y = [bi if k else ai for ai, bi, k in zip(a, b, row, strict=True)]
        count += abs(np.mean(x) - np.mean(y)) > observed
    return (count + 1) / (n + 1)


def test_the_approximate_randomization_of_a_mean_equals_sacrebleus_rule():
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 1, 30), rng.normal(0.4, 1, 30)
    assert paired_ar_p(a, b, 7, 500) == pytest.approx(ar_loop(a, b, 7, 500))
    assert paired_ar_p(a, a, 7, 500) == 1.0


def test_compare_reads_the_recorded_neural_metrics(tmp_path):
    systems = [from_result_dir(result_folder(tmp_path, "base", 0.0)),
               from_result_dir(result_folder(tmp_path, "better", 4.0))]
    assert recorded_neural(systems) == ("comet", "metricx")
    report = compare(systems, n_ar=1000, metrics=[*M.default_compared()[:1], *recorded_neural(systems)])
    comet = report.intervals[systems[1].name]["comet"]
    assert comet.score == pytest.approx(np.mean(systems[1].segment_scores["comet"]))
    assert comet.low < comet.score < comet.high
    found = {c.metric: c for c in report.comparisons}
    assert found["comet"].delta > 0 and found["comet"].p_bootstrap < 0.05 and found["comet"].p_ar < 0.05
    assert found["comet"].p_ar == pytest.approx(paired_ar_p(systems[0].segment_scores["comet"],
                                                            systems[1].segment_scores["comet"], 12345, 1000))
    assert found["metricx"].delta < 0  # an error score: the better system scores lower
    assert "metricx: lower is better" in significance_table(report, systems)


def test_the_report_tests_the_neural_metrics_both_runs_recorded(tmp_path):
    systems = [from_result_dir(result_folder(tmp_path, "a", 0.0)),
               from_result_dir(result_folder(tmp_path, "b", 1.0, metrics=("comet",)))]
    tests = [t for t in pair_tests(systems, n_ar=200).tests if t.metric in ("comet", "metricx")]
    assert [t.metric for t in tests] == ["comet"] and tests[0].p_ar is not None


def test_a_system_without_the_segment_scores_is_refused_by_name(tmp_path):
    systems = [from_result_dir(result_folder(tmp_path, "base", 0.0)),
               from_result_dir(result_folder(tmp_path, "plain", 1.0, metrics=()))]
    assert recorded_neural(systems) == ()
    with pytest.raises(CompareError, match=r"plain: has no comet segment scores; evaluate it with metrics"):
        compare(systems, metrics=["comet"])


def test_a_gpu_asked_for_where_there_is_none_is_refused_before_decoding(monkeypatch):
    import torch

    from seqlab.metrics.neural import MetricModelError, NeuralSettings, check_neural

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(MetricModelError, match="neural.device=cuda: no GPU here"):
        check_neural(["bleu"], NeuralSettings(device="cuda"), have_references=True)
    with pytest.raises(MetricModelError, match="bertscore compares with references and this test set has none"):
        check_neural(["bertscore"], NeuralSettings(), have_references=False)


def test_the_wandb_predictions_table_has_a_column_per_neural_metric():
    from seqlab.tracking.wandb import log_predictions

    class Logger:
        def log_table(self, key, columns, data):
            self.columns, self.data = columns, data

    rows = [{"id": str(i), "source": "s", "reference": "r", "hypothesis": "h",
             "nbest": [{"text": "h", "logprob": -1.0}], "segment_scores": {"comet": 80.0 + i, "metricx": 3.0}}
            for i in range(3)]
    logger = Logger()
    log_predictions(logger, rows)
    assert logger.columns[-2:] == ["comet", "metricx"] and [r[-2] for r in logger.data] == [80.0, 81.0, 82.0]


def test_two_settings_of_one_checkpoint_are_told_apart_by_their_folders_and_archived_records_compare(tmp_path):
    """Two prompts of one checkpoint and decoding share a label: each is named by its setting's folder; an
    archived record (results/EXPERIMENT/STAGE.json with its .gz outputs) is a system as a folder is."""
    from seqlab.analysis.compare import distinct_names, from_result
    from seqlab.io import atomic_write_lines_gz

    a = result_folder(tmp_path / "zero" / "imported", "greedy-1a", 0.0)  # results_dir/<run>/<label>-<key>
    b = result_folder(tmp_path / "two" / "imported", "greedy-2b", 4.0)
    for folder in (a, b):
        (folder / "metrics.json").write_text(json.dumps({"status": "ok", "label": "greedy", "metrics": {}}))
    assert [s.name for s in (from_result(a), from_result(b))] == ["imported/greedy", "imported/greedy"]
    systems = distinct_names([from_result(a), from_result(b)])
    assert [s.name for s in systems] == ["imported/greedy (greedy-1a)", "imported/greedy (greedy-2b)"]
    with pytest.raises(CompareError, match="same name"):
        compare(distinct_names([from_result(a), from_result(a)]), n_bootstrap=10, n_ar=10)
    archive = tmp_path / "results" / "ref"
    atomic_write_lines_gz(archive / "greedy.hyps.txt.gz", [f"base {i}" for i in range(40)])
    atomic_write_lines_gz(archive / "test.references.txt.gz", REFS)
    (archive / "greedy.json").write_text(json.dumps({"stage": "greedy", "status": "ok", "result": {"outputs": {
        "hypotheses": "greedy.hyps.txt.gz", "references": ["test.references.txt.gz"]}}}))
    report = compare([from_result(archive / "greedy.json"), *systems], n_bootstrap=10, n_ar=10,
                     metrics=("bleu",))
    assert [c.system for c in report.comparisons] == ["imported/greedy (greedy-1a)", "imported/greedy (greedy-2b)"]
    (archive / "broken.json").write_text("{}")
    with pytest.raises(CompareError, match="broken.json: not an archived evaluation record"):
        from_result(archive / "broken.json")
