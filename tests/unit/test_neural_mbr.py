"""COMET and BERTScore as MBR utilities and CometKiwi as a QE reranker, each against a brute-force computation:
every (candidate, pseudo-reference) pair scored alone (COMET by seqlab's scorer, which equals unbabel-comet on
these models, test_comet; BERTScore by bert-score itself), then the mean per candidate."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")

from seqlab.config import ConfigError  # noqa: E402
from seqlab.decoding.mbr import MBRConfig, choose  # noqa: E402
from seqlab.metrics.neural.bertscore import BertScoreSettings, load_bertscore  # noqa: E402
from seqlab.metrics.neural.comet import load_comet  # noqa: E402
from tests.encoder_folders import bert_folder  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "comet"
SOURCE = "Der Hund bellte jeden Morgen den Briefträger an."
CANDIDATES = ["The dog barked at the postman.", "The dog barked every morning.", "A cat sat on the mat.",
              "The dog barked at the postman.", "Every morning the dog barked at the postman."]


def test_comet_mbr_equals_every_pair_scored_alone():
    model = FIXTURES / "regression-mix-softmax-avg"
    choice = choose(MBRConfig(utility="comet", candidates=5, model=str(model)), CANDIDATES, source=SOURCE)
    brute = [np.mean([100 * load_comet(model).score([SOURCE], [h], [r])[0] for r in CANDIDATES])
             for h in CANDIDATES]
    np.testing.assert_allclose(choice.expected_utility, brute, atol=1e-4)
    assert choice.chosen == int(np.argmax(brute))


def test_bertscore_mbr_equals_bert_score_on_every_pair(tmp_path):
    bert_score = pytest.importorskip("bert_score")
    folder = bert_folder(tmp_path)
    mbr = MBRConfig(utility="bertscore", candidates=5, model=str(folder), layers=2)
    choice = choose(mbr, CANDIDATES, source=SOURCE)
    brute = []
    for h in CANDIDATES:
        f1 = [float(bert_score.score([h], [r], model_type=str(folder), num_layers=2, nthreads=0)[2][0])
              for r in CANDIDATES]
        brute.append(100 * np.mean(f1))
    np.testing.assert_allclose(choice.expected_utility, brute, atol=1e-4)
    scorer = load_bertscore(BertScoreSettings(model=str(folder), num_layers=2))
    assert scorer.pairwise(CANDIDATES, CANDIDATES).shape == (5, 5)


def test_cometkiwi_reranks_by_each_candidates_estimate():
    model = FIXTURES / "unified-kiwi"
    mbr = MBRConfig(utility="cometkiwi", candidates=5, model=str(model))
    assert mbr.label == "qe_cometkiwi_c5"
    choice = choose(mbr, CANDIDATES, source=SOURCE)
    alone = [100 * load_comet(model).score([SOURCE], [h], None)[0] for h in CANDIDATES]
    np.testing.assert_allclose(choice.expected_utility, alone, atol=1e-4)
    assert choice.order == sorted(range(5), key=lambda i: -alone[i])


def test_neural_utility_settings_are_checked():
    with pytest.raises(ConfigError, match="decoding.mbr.model / decoding.mbr.layers name a neural utility"):
        MBRConfig(utility="chrf", model="roberta-large")
    with pytest.raises(ConfigError, match="decoding.mbr.references=4: utility=cometkiwi scores each candidate"):
        MBRConfig(utility="cometkiwi", references=4)
    with pytest.raises(ConfigError, match="decoding.mbr.utility='metricx' is not valid"):
        MBRConfig(utility="metricx")


def test_a_qe_model_is_refused_as_an_mbr_utility(tmp_path):
    shutil.copytree(FIXTURES / "encoder", tmp_path / "encoder")
    kiwi = shutil.copytree(FIXTURES / "unified-kiwi", tmp_path / "unified-kiwi")
    with pytest.raises(Exception, match="MBR needs a reference-based COMET model"):
        choose(MBRConfig(utility="comet", candidates=5, model=str(kiwi)), CANDIDATES, source=SOURCE)
