"""COMET and CometKiwi against unbabel-comet itself: tiny random models in the library's own folder layout and
the scores the library gave them (tests/fixtures/comet, written by its write_fixtures.py in the library's own
environment: make comet-fixtures). Every model choice the readers take from the files is covered by one model:
layer mixing by softmax and by sparsemax, with and without layer norm, one fixed layer, avg / max / cls
pooling, regression, referenceless regression and unified inputs of two and three segments; the samples hold
an empty translation, segments longer than the encoder's positions and non-Latin text."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

pytest.importorskip("transformers")

from seqlab.metrics.neural.comet import load_comet  # noqa: E402
from seqlab.metrics.neural.errors import MetricModelError  # noqa: E402
from seqlab.metrics.neural.mixing import sparsemax  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "comet"
RECORD = json.loads((FIXTURES / "scores.json").read_text(encoding="utf-8"))
SAMPLES = RECORD["samples"]
SRC, MT, REF = ([s[k] for s in SAMPLES] for k in ("src", "mt", "ref"))


@pytest.fixture(scope="module")
def models():
    return {name: load_comet(FIXTURES / name) for name in RECORD["scores"]}


@pytest.mark.parametrize("name", sorted(RECORD["scores"]))
def test_scores_equal_unbabel_comet(models, name):
    expected = RECORD["scores"][name]
    got = models[name].score(SRC, MT, REF)
    for batch in ("batch1", "batch4"):
        assert max(abs(a - b) for a, b in zip(got, expected[batch], strict=True)) < 1e-5, (name, batch)


@pytest.mark.parametrize("name", sorted(RECORD["scores"]))
def test_a_sample_scored_alone_equals_it_scored_in_a_batch(name):
    model = load_comet(FIXTURES / name)
    batched = model.score(SRC, MT, REF)
    for i in (0, 3, 4):  # a short one, the empty translation, the truncated one
        alone = load_comet(FIXTURES / name).score(SRC[i:i + 1], MT[i:i + 1], REF[i:i + 1])
        assert abs(alone[0] - batched[i]) < 1e-5


def test_the_long_segments_are_truncated_to_the_encoder_positions(models):
    model = models["regression-mix-softmax-avg"]
    ids = model.tokenize(MT[4])
    assert len(ids) == model.max_positions - 2 and ids[-1] == model.tokenizer.sep_token_id
    joined = models["unified-kiwi"].joined((MT[4], SRC[4]))
    assert len(joined) == models["unified-kiwi"].max_positions


def test_sentences_are_encoded_once_per_model(models):
    model = load_comet(FIXTURES / "regression-mix-softmax-avg")
    first = model.score(SRC, MT, REF)
    unique = len(set(SRC) | set(MT) | set(REF))
    assert model.encoded == unique
    other = [m + " !" for m in MT]
    model.score(SRC, other, REF)  # a second system on the same test set: only its hypotheses are new
    assert model.encoded == unique + len(set(other) - set(SRC) - set(REF))
    assert model.score(SRC, MT, REF) == first and model.encoded == unique + len(set(other))


def test_cometkiwi_needs_no_reference_and_ignores_one(models):
    kiwi = models["unified-kiwi"]
    assert kiwi.score(SRC, MT, None) == pytest.approx(kiwi.score(SRC, MT, REF), abs=1e-6)


def test_the_three_input_unified_model_averages_its_inputs(models):
    model = models["unified-ref"]
    both = model.score(SRC, MT, REF)
    by_src, by_ref = model.score(SRC, MT, None), model.score(None, MT, REF)
    joined = model.estimate(model.embed([(m, s, r) for m, s, r in zip(MT, SRC, REF, strict=True)]))
    assert both == pytest.approx([(a + b + c) / 3 for a, b, c in zip(by_src, by_ref, joined, strict=True)],
                                 abs=1e-6)


def test_sparsemax_is_the_projection_onto_the_simplex():
    assert sparsemax(torch.tensor([1.0, 0.5, -1.0])).tolist() == pytest.approx([0.75, 0.25, 0.0])
    assert sparsemax(torch.tensor([0.2, 0.2])).tolist() == pytest.approx([0.5, 0.5])
    z = torch.randn(7, generator=torch.Generator().manual_seed(0))
    p = sparsemax(z)
    assert float(p.sum()) == pytest.approx(1.0) and bool((p >= 0).all())
    support = p > 0  # on its support p = z - tau, one tau for all
    assert torch.allclose((z - p)[support], (z - p)[support][0].expand(int(support.sum())))


def copy_model(tmp_path: Path, name: str = "regression-mix-softmax-avg") -> Path:
    shutil.copytree(FIXTURES / "encoder", tmp_path / "encoder")
    shutil.copytree(FIXTURES / name, tmp_path / name)
    return tmp_path / name


def test_a_reference_based_model_without_references_is_refused(models):
    with pytest.raises(MetricModelError, match="reference-based COMET model.*cometkiwi"):
        models["regression-mix-softmax-avg"].score(SRC, MT, None)


def test_a_class_seqlab_does_not_compute_is_refused_by_name(tmp_path):
    folder = copy_model(tmp_path)
    hparams = yaml.safe_load((folder / "hparams.yaml").read_text())
    hparams["class_identifier"] = "xcomet_metric"
    (folder / "hparams.yaml").write_text(yaml.safe_dump(hparams))
    with pytest.raises(MetricModelError, match=r"hparams.yaml: class_identifier='xcomet_metric' is not computed"):
        load_comet(folder)


def test_missing_and_corrupt_files_are_named(tmp_path):
    folder = copy_model(tmp_path)
    ckpt = folder / "checkpoints" / "model.ckpt"
    ckpt.write_bytes(ckpt.read_bytes()[:1000])
    with pytest.raises(MetricModelError, match="model.ckpt: cannot be read.*truncated or corrupt"):
        load_comet(folder)
    (folder / "hparams.yaml").unlink()
    with pytest.raises(MetricModelError, match="hparams.yaml: missing"):
        load_comet(folder)


def test_a_hub_name_not_in_the_cache_names_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(MetricModelError, match=r"Unbabel/wmt22-comet-da: not in the local Hugging Face cache .*"
                                               r"models--Unbabel--wmt22-comet-da.*huggingface-cli download"):
        load_comet("Unbabel/wmt22-comet-da")


def test_a_model_in_the_hub_cache_loads_by_name(tmp_path, monkeypatch, models):
    repo = tmp_path / "hub" / "models--org--tiny-comet"
    snapshot = repo / "snapshots" / "0123456789abcdef"
    copy_model(snapshot.parent, "regression-mix-softmax-avg")
    shutil.move(str(snapshot.parent / "regression-mix-softmax-avg"), str(snapshot))
    hparams = yaml.safe_load((snapshot / "hparams.yaml").read_text())
    state = torch.load(snapshot / "checkpoints" / "model.ckpt", weights_only=True)
    state["hyper_parameters"]["pretrained_model"] = hparams["pretrained_model"] = str(snapshot.parent / "encoder")
    torch.save(state, snapshot / "checkpoints" / "model.ckpt")
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123456789abcdef")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    model = load_comet("org/tiny-comet")
    assert model.score(SRC, MT, REF) == pytest.approx(RECORD["scores"]["regression-mix-softmax-avg"]["batch1"],
                                                      abs=1e-5)
    assert "version:0123456789ab" in model.signature()


def test_the_encoder_is_found_beside_the_model_folder_and_a_hub_name_signs_as_itself(tmp_path, monkeypatch):
    """docs/neural_metrics.md: a bare encoder name is a folder of that name beside the model folder (else the
    hub cache); a model read by its hub name is signed with that name and the cached commit, never the hash."""
    folder = copy_model(tmp_path)
    hparams = yaml.safe_load((folder / "hparams.yaml").read_text())
    hparams["pretrained_model"] = "encoder"  # as a hub name: found beside, at tmp_path/encoder
    (folder / "hparams.yaml").write_text(yaml.safe_dump(hparams))
    assert load_comet(folder).score(SRC, MT, REF) == load_comet(FIXTURES / "regression-mix-softmax-avg").score(
        SRC, MT, REF)
    hub = tmp_path / "hub"
    repo = hub / "models--Org--tiny-comet"
    snapshot = repo / "snapshots" / "0123456789abcdef"
    shutil.copytree(FIXTURES / "regression-mix-softmax-avg", snapshot)
    shutil.copytree(FIXTURES / "encoder", repo / "snapshots" / "encoder")  # ../encoder from the snapshot
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123456789abcdef")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    signature = load_comet("Org/tiny-comet").signature()
    assert signature == "comet:Org/tiny-comet|kind:regression_metric|version:0123456789ab|seqlab-fp32"
