"""Neural metrics through the evaluation stage, on the COMET fixtures (tiny random models, so the numbers mean
nothing; what is checked is where they go): segment scores on every hypothesis line, the mean with its
interval and signature in metrics.json, a missing model refused before decoding, and a metric failing after
decoding recorded without losing BLEU or the hypotheses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from seqlab.app.evaluate import run_evaluation  # noqa: E402
from seqlab.metrics.neural import MetricModelError  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "comet"


@pytest.fixture()
def comet_models(tmp_path) -> dict[str, Path]:
    shutil.copytree(FIXTURES / "encoder", tmp_path / "encoder")
    return {name: Path(shutil.copytree(FIXTURES / name, tmp_path / name))
            for name in ("regression-mix-softmax-avg", "unified-kiwi")}


def result_folder(cfg) -> Path:
    folders = [p.parent for p in Path(cfg.results_dir).glob("**/metrics.json")]
    assert len(folders) == 1, folders
    return folders[0]


def common(ckpt, models) -> list[str]:
    return [f"ckpt={ckpt}", "logger=none", "decoding=greedy", "decoding.max_length=12", "limit=6",
            "score_references=false", "engine=seqlab", "n_bootstrap=50",
            f"neural.comet={models['regression-mix-softmax-avg']}", f"neural.cometkiwi={models['unified-kiwi']}"]


def test_comet_and_cometkiwi_are_recorded_per_segment_and_for_the_test_set(make_cfg, smoke_checkpoint, tmp_path,
                                                                          comet_models):
    cfg = make_cfg("eval", [*common(smoke_checkpoint, comet_models), "metrics=[bleu,comet,cometkiwi]"], out=tmp_path)
    metrics = run_evaluation(cfg)["metrics"]
    folder = result_folder(cfg)
    lines = [json.loads(line) for line in (folder / "hypotheses.jsonl").read_text().splitlines()]
    for name in ("comet", "cometkiwi"):
        segments = [line["segment_scores"][name] for line in lines]
        assert metrics[name] == pytest.approx(sum(segments) / len(segments))
        low, high = metrics[f"{name}_ci"]
        assert low <= metrics[name] <= high
        assert metrics[f"{name}_signature"].startswith(f"comet:{Path(cfg.neural[name]).name}|")
    assert "bleu" in metrics and "metric_errors" not in metrics
    recorded = json.loads((folder / "metrics.json").read_text())
    assert recorded["settings"]["neural"]["comet"] == cfg.neural.comet


def test_a_metric_model_not_in_the_cache_is_refused_before_decoding(make_cfg, smoke_checkpoint, tmp_path,
                                                                   comet_models, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    cfg = make_cfg("eval", [*common(smoke_checkpoint, comet_models), "metrics=[bleu,comet]",
                            "neural.comet=Unbabel/wmt22-comet-da"], out=tmp_path / "out")
    with pytest.raises(MetricModelError, match=r"neural.comet: Unbabel/wmt22-comet-da: not in the local Hugging "
                                               r"Face cache \(.*hub/models--Unbabel--wmt22-comet-da\)"):
        run_evaluation(cfg)
    folder = result_folder(cfg)
    assert not (folder / "hypotheses.jsonl").exists()
    assert json.loads((folder / "metrics.json").read_text())["status"] == "failed"


def test_a_metric_failing_after_decoding_costs_only_itself(make_cfg, smoke_checkpoint, tmp_path, comet_models):
    broken = comet_models["regression-mix-softmax-avg"] / "checkpoints" / "model.ckpt"
    cfg = make_cfg("eval", [*common(smoke_checkpoint, comet_models), "metrics=[bleu,comet,cometkiwi]"], out=tmp_path)
    broken.write_bytes(b"not a checkpoint")  # found before decoding, unreadable when scored
    payload = run_evaluation(cfg)
    metrics = payload["metrics"]
    assert payload["status"] == "ok" and "bleu" in metrics and "cometkiwi" in metrics and "comet" not in metrics
    assert "model.ckpt: cannot be read" in metrics["metric_errors"]["comet"]
    lines = (result_folder(cfg) / "hypotheses.jsonl").read_text().splitlines()
    assert len(lines) == 6 and all(set(json.loads(line)["segment_scores"]) == {"cometkiwi"} for line in lines)


def test_an_unknown_neural_key_is_refused_by_name(make_cfg, smoke_checkpoint, tmp_path, comet_models):
    cfg = make_cfg("eval", [*common(smoke_checkpoint, comet_models), "metrics=[bleu,bertscore]",
                            "+neural.bertscore.layer=3"], out=tmp_path)
    with pytest.raises(Exception, match=r"neural.bertscore: unknown keys \['layer'\]"):
        run_evaluation(cfg)


@pytest.mark.parametrize("preset,label", [("mbr_comet", "mbr_comet_c4"), ("qe_cometkiwi", "qe_cometkiwi_c4")])
def test_comet_mbr_and_cometkiwi_reranking_through_evaluate(make_cfg, smoke_checkpoint, tmp_path, comet_models,
                                                            preset, label):
    model = comet_models["regression-mix-softmax-avg" if preset == "mbr_comet" else "unified-kiwi"]
    extra = ["decoding.num_beams=4"] if preset == "qe_cometkiwi" else []
    cfg = make_cfg("eval", [f"ckpt={smoke_checkpoint}", "logger=none", f"decoding={preset}", *extra,
                            "decoding.mbr.candidates=4", f"decoding.mbr.model={model}", "decoding.max_length=10",
                            "limit=3", "n_bootstrap=0", "score_references=false", "engine=seqlab"], out=tmp_path)
    payload = run_evaluation(cfg)
    assert payload["label"].startswith(label)
    rows = [json.loads(line) for line in (result_folder(cfg) / "candidates.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(len(r["candidates"]) == 4 for r in rows)


def test_a_finished_setting_is_scored_from_its_recorded_hypotheses(make_cfg, smoke_checkpoint, tmp_path,
                                                                   comet_models):
    first = run_evaluation(make_cfg("eval", [*common(smoke_checkpoint, comet_models), "metrics=[bleu]"],
                                    out=tmp_path))
    cfg = make_cfg("eval", [*common(smoke_checkpoint, comet_models), "metrics=[bleu,comet]"], out=tmp_path)
    folder = result_folder(cfg)
    before = (folder / "hypotheses.jsonl").read_text()
    again = run_evaluation(cfg)
    assert again["metrics"]["decode_seconds"] == first["metrics"]["decode_seconds"]  # not decoded again
    assert "comet" in again["metrics"] and again["metrics"]["bleu"] == first["metrics"]["bleu"]
    lines = [json.loads(line) for line in (folder / "hypotheses.jsonl").read_text().splitlines()]
    assert [line["hypothesis"] for line in lines] == [json.loads(x)["hypothesis"] for x in before.splitlines()]
    assert all("comet" in line["segment_scores"] for line in lines)
    assert run_evaluation(cfg)["status"] == "skipped"


def test_a_sweep_encodes_its_shared_sentences_once(make_cfg, smoke_checkpoint, tmp_path, comet_models):
    from seqlab.metrics.neural import encoded_sentences
    from seqlab.metrics.neural.suite import LOADED

    LOADED.clear()
    texts: set[str] = set()
    for decoding in (["decoding=greedy"], ["decoding=beam", "decoding.num_beams=2"]):
        cfg = make_cfg("eval", [*common(smoke_checkpoint, comet_models), "metrics=[bleu,comet]", *decoding],
                       out=tmp_path / decoding[0])
        label = run_evaluation(cfg)["label"]
        (folder,) = Path(cfg.results_dir).glob(f"**/{label}-*")
        for line in (folder / "hypotheses.jsonl").read_text().splitlines():
            row = json.loads(line)
            texts |= {row["source"], row["reference"], row["hypothesis"]}
    (count,) = encoded_sentences().values()
    assert count == len(texts)  # each distinct source, reference and hypothesis once over both settings


def test_another_metric_model_rescores_the_recorded_hypotheses(make_cfg, smoke_checkpoint, tmp_path, comet_models):
    other = Path(shutil.copytree(FIXTURES / "regression-layer1-cls", tmp_path / "regression-layer1-cls"))
    first = run_evaluation(make_cfg("eval", [*common(smoke_checkpoint, comet_models), "metrics=[bleu,comet]"],
                                    out=tmp_path))
    again = run_evaluation(make_cfg("eval", [*common(smoke_checkpoint, comet_models), "metrics=[bleu,comet]",
                                             f"neural.comet={other}"], out=tmp_path))
    assert again["metrics"]["decode_seconds"] == first["metrics"]["decode_seconds"]  # not decoded again
    assert again["metrics"]["comet"] != first["metrics"]["comet"]
    assert again["metrics"]["comet_signature"].startswith("comet:regression-layer1-cls|")
    assert again["settings"]["neural"]["comet"] == str(other)


def test_a_rescore_that_fails_leaves_no_score_of_the_other_model_and_is_retried(make_cfg, smoke_checkpoint,
                                                                               tmp_path, comet_models):
    """Every neural score in a result folder was computed by the model its settings name: a finished setting
    asked again with another COMET model that cannot score keeps none of the first model's scores (metrics.json
    and hypotheses.jsonl), records the failure, and is scored on the next run once the model reads."""
    broken = Path(shutil.copytree(FIXTURES / "regression-layer1-cls", tmp_path / "regression-layer1-cls"))
    first = run_evaluation(make_cfg("eval", [*common(smoke_checkpoint, comet_models), "metrics=[bleu,comet]"],
                                    out=tmp_path))
    assert first["metrics"]["comet_signature"].startswith("comet:regression-mix-softmax-avg|")
    good = (broken / "checkpoints" / "model.ckpt").read_bytes()
    (broken / "checkpoints" / "model.ckpt").write_bytes(b"not a checkpoint")  # found, but it cannot score
    cfg = make_cfg("eval", [*common(smoke_checkpoint, comet_models), "metrics=[bleu,comet]",
                            f"neural.comet={broken}"], out=tmp_path)
    folder = result_folder(cfg)

    def files() -> tuple[dict, list[dict]]:
        return (json.loads((folder / "metrics.json").read_text()),
                [json.loads(line) for line in (folder / "hypotheses.jsonl").read_text().splitlines()])

    failed = run_evaluation(cfg)
    for payload in (failed, files()[0]):
        assert not {"comet", "comet_ci", "comet_signature"} & set(payload["metrics"])
        assert "model.ckpt: cannot be read" in payload["metrics"]["metric_errors"]["comet"]
        assert "comet" not in payload["settings"]["neural"]  # no model is named for a score it did not give
        assert payload["metrics"]["bleu"] == first["metrics"]["bleu"]
    assert all("comet" not in (line.get("segment_scores") or {}) for line in files()[1])
    (broken / "checkpoints" / "model.ckpt").write_bytes(good)
    again = run_evaluation(cfg)  # retried, not "already evaluated"
    assert again["metrics"]["comet_signature"].startswith("comet:regression-layer1-cls|")
    assert again["settings"]["neural"]["comet"] == str(broken) and "metric_errors" not in again["metrics"]
    segments = [line["segment_scores"]["comet"] for line in files()[1]]
    assert again["metrics"]["comet"] == pytest.approx(sum(segments) / len(segments))
    assert run_evaluation(cfg)["status"] == "skipped"


@pytest.mark.parametrize("metric,model,kind", [("cometkiwi", "regression-mix-softmax-avg", "reference-based"),
                                               ("comet", "referenceless-avg", "reference-free")])
def test_a_comet_model_of_the_other_kind_is_refused_by_its_key_before_decoding(make_cfg, smoke_checkpoint, tmp_path,
                                                                               comet_models, metric, model, kind):
    folder = comet_models.get(model) or Path(shutil.copytree(FIXTURES / model, tmp_path / model))
    cfg = make_cfg("eval", [*common(smoke_checkpoint, comet_models), f"metrics=[bleu,{metric}]",
                            f"neural.{metric}={folder}"], out=tmp_path / "out")
    with pytest.raises(MetricModelError, match=rf"neural.{metric}=.*{model}: a {kind} COMET model"):
        run_evaluation(cfg)
    assert not (result_folder(cfg) / "hypotheses.jsonl").exists()


def test_a_missing_metric_model_ends_evaluate_in_one_line_with_status_2(tmp_path):
    from seqlab.app.cli import reraise

    with pytest.raises(SystemExit) as exit_:
        reraise("evaluate", MetricModelError("neural.comet: /nowhere: no such folder"))
    assert exit_.value.code == 2
