"""BERTScore against bert-score itself (the `metrics` extra), on tiny random BERT and RoBERTa folders built here
(WordPiece and byte-level BPE tokenizers, as bert-base and roberta-large ship them): precision, recall and F1
with and without idf, several references, an empty hypothesis, a hypothesis longer than the tokenizer's
`model_max_length`, non-Latin text, and rescaling with a baseline file."""

from __future__ import annotations

from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

from seqlab.metrics.neural.bertscore import BertScoreSettings, load_bertscore  # noqa: E402
from seqlab.metrics.neural.errors import MetricModelError  # noqa: E402
from tests.encoder_folders import bert_folder, roberta_folder  # noqa: E402

HYPS = ["the quick brown fox", "Hello World! How are you?", "déjà vu café", "the lazy dog saves nine " * 8,
        "x", "el perro come"]
REFS = ["the quick brown dog jumps", "hello world", "naïve café", "a stitch in time saves nine", "numbers 123",
        "el perro come la comida"]
REFS2 = ["a quick fox", "how are you today", "déjà vu", "the lazy dog", "123 and 4567", "la comida rápida"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("bertscore")
    return {"bert": bert_folder(root), "roberta": roberta_folder(root)}


def library(folder: Path, hyps, refs, **kw):
    bert_score = pytest.importorskip("bert_score")
    p, r, f = bert_score.score(hyps, refs, model_type=str(folder), num_layers=2, batch_size=1, nthreads=0, **kw)
    return p.tolist(), r.tolist(), f.tolist()


def close(a, b) -> bool:
    return max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-5


@pytest.mark.parametrize("kind", ["bert", "roberta"])
@pytest.mark.parametrize("idf", [False, True])
def test_precision_recall_f1_equal_bert_score(folders, kind, idf):
    p, r, f = library(folders[kind], HYPS, REFS, idf=idf)
    got = load_bertscore(BertScoreSettings(model=str(folders[kind]), num_layers=2, idf=idf)).score(HYPS, [REFS])
    assert close(got.precision, p) and close(got.recall, r) and close(got.f1, f)


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_several_references_take_the_best_of_each(folders, kind):
    p, r, f = library(folders[kind], HYPS, [list(pair) for pair in zip(REFS, REFS2, strict=True)])
    got = load_bertscore(BertScoreSettings(model=str(folders[kind]), num_layers=2)).score(HYPS, [REFS, REFS2])
    assert close(got.precision, p) and close(got.recall, r) and close(got.f1, f)


def test_an_empty_hypothesis_scores_zero(folders):
    scorer = load_bertscore(BertScoreSettings(model=str(folders["bert"]), num_layers=2))
    got = scorer.score(["", "  ", "the quick brown fox"], [["the dog", "a dog", "the quick brown dog"]])
    assert got.precision[:2] == got.recall[:2] == got.f1[:2] == [0.0, 0.0] and got.f1[2] > 0


def test_a_long_hypothesis_is_cut_at_model_max_length(folders):
    scorer = load_bertscore(BertScoreSettings(model=str(folders["bert"]), num_layers=2))
    ids = scorer.ids(HYPS[3])
    assert len(ids) == 24 and ids[-1] == scorer.tokenizer.sep_token_id


def test_rescaling_with_a_baseline_file(folders, tmp_path):
    baseline = tmp_path / "baseline.tsv"
    baseline.write_text("LAYER,P,R,F\n0,0.1,0.2,0.3\n1,0.2,0.3,0.4\n2,0.5,0.4,0.45\n3,0.6,0.6,0.6\n")
    p, r, f = library(folders["bert"], HYPS, REFS, rescale_with_baseline=True, lang="en", baseline_path=str(baseline))
    settings = BertScoreSettings(model=str(folders["bert"]), num_layers=2, baseline=str(baseline))
    got = load_bertscore(settings).score(HYPS, [REFS])
    assert close(got.precision, p) and close(got.recall, r) and close(got.f1, f)
    assert "rescaled" in load_bertscore(settings).signature()


def test_each_sentence_is_encoded_once(folders):
    scorer = load_bertscore(BertScoreSettings(model=str(folders["bert"]), num_layers=2))
    scorer.score(HYPS, [REFS])
    first = scorer.encoded
    scorer.score([h + " fox" for h in HYPS], [REFS])  # another system: only its hypotheses are new
    assert first == len(set(HYPS) | set(REFS)) and scorer.encoded == first + len(HYPS)


def test_bad_settings_are_refused_by_name(folders):
    with pytest.raises(MetricModelError, match="bertscore.num_layers: .* has no tuned layer"):
        BertScoreSettings(model=str(folders["bert"])).layers()
    with pytest.raises(MetricModelError, match="bertscore.num_layers=9: .* has 3 layers"):
        load_bertscore(BertScoreSettings(model=str(folders["bert"]), num_layers=9))
    assert BertScoreSettings().layers() == 17  # roberta-large: bert-score's tuned layer


def test_a_folder_that_is_not_an_encoder_seqlab_can_cut_is_refused(tmp_path):
    cfg = transformers.GPT2Config(vocab_size=50, n_embd=8, n_layer=1, n_head=2, n_positions=16)
    transformers.GPT2Model(cfg).save_pretrained(tmp_path / "gpt2")
    with pytest.raises(MetricModelError, match="GPT2Model is not an encoder whose layers seqlab can cut"):
        load_bertscore(BertScoreSettings(model=str(tmp_path / "gpt2"), num_layers=1))
