"""MetricX on a tiny random mT5 regression checkpoint built here (the vocabulary of mT5, so that id 250089
exists; a SentencePiece tokenizer in its own folder, as MetricX reads google/mt5-xl's): the scores against an
independent computation (seqlab's own T5 forward of the same folder, one decoder step from id 0), the input
strings of MetricX-23 and -24 with and without references, the dropped EOS, the clamp, and bad models."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from seqlab.interop.hf import from_state  # noqa: E402
from seqlab.interop.hf_folder import read_json, read_weights  # noqa: E402
from seqlab.metrics.neural.errors import MetricModelError  # noqa: E402
from seqlab.metrics.neural.metricx import SCORE_ID, MetricXSettings, load_metricx, metricx_input  # noqa: E402
from tests.hf_tokenizer_folders import t5_spm  # noqa: E402

HYPS = ["the quick brown fox", "", "the lazy dog saves nine " * 40, "déjà vu café"]
REFS = ["the quick brown dog", "a stitch in time", "the lazy dog", "naïve café"]
SRCS = ["el perro come", "Hello World!", "numbers 123 and 4567 appear here", "el perro"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("metricx")
    tok = transformers.T5Tokenizer.from_pretrained(t5_spm(root), extra_ids=0)
    tok.save_pretrained(root / "tokenizer")
    torch.manual_seed(0)
    cfg = transformers.MT5Config(vocab_size=250112, d_model=8, d_kv=4, d_ff=16, num_layers=2, num_decoder_layers=2,
                                 num_heads=2, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
                                 tie_word_embeddings=False)
    model = transformers.MT5ForConditionalGeneration(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
        ids = torch.tensor([tok("el perro come la comida")["input_ids"]])
        h = model(input_ids=ids, decoder_input_ids=torch.zeros(1, 1, dtype=torch.long),
                  output_hidden_states=True).decoder_hidden_states[-1][0, 0]
        # the score's row points along one input's state: scores around 10, some clamped at 0 or 25
        model.lm_head.weight[SCORE_ID] = 10 * h / h.dot(h) + 2.0 * torch.randn(8)
    model.save_pretrained(root / "metricx-24-tiny")
    untied(root / "metricx-24-tiny", root / "metricx-24-untied")
    return root


def untied(tied, folder):
    """MetricX's own layout: tie_word_embeddings false and an lm_head of its own (transformers 5 writes mT5 tied)."""
    from safetensors.torch import load_file, save_file

    folder.mkdir()
    config = read_json(tied / "config.json")
    (folder / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))
    state = load_file(str(tied / "model.safetensors"))
    head = state["shared.weight"].clone()
    head[SCORE_ID] = 3.0 * head[SCORE_ID] + 0.5 * torch.randn(head.shape[1], generator=torch.Generator().manual_seed(1))
    save_file({**state, "lm_head.weight": head}, str(folder / "model.safetensors"), metadata={"format": "pt"})


def independent(folder, tokenizer, texts, limit):
    """seqlab's own mT5 forward (interop), one step from id 0, logit SCORE_ID clamped: MetricX's rule."""
    model = from_state(read_json(folder / "config.json"), read_weights(folder), str(folder)).eval()
    out = []
    for text in texts:
        ids = torch.tensor([tokenizer(text, max_length=limit, truncation=True)["input_ids"][:-1]])
        with torch.no_grad():
            logits = model(ids, torch.zeros_like(ids, dtype=torch.bool), torch.zeros(1, 1, dtype=torch.long))
        out.append(float(logits[0, 0, SCORE_ID].clamp(0, 25)))
    return out


@pytest.mark.parametrize("name", ["metricx-24-tiny", "metricx-24-untied"])
@pytest.mark.parametrize("refs", [True, False])
def test_scores_equal_an_independent_forward(folders, refs, name):
    settings = MetricXSettings(model=str(folders / name), tokenizer=str(folders / "tokenizer"), max_input_length=64)
    scorer = load_metricx(settings)
    got = scorer.score(SRCS, HYPS, REFS if refs else None)
    texts = [metricx_input("24", h, s, r if refs else None) for h, s, r in zip(HYPS, SRCS, REFS, strict=True)]
    expected = independent(folders / name, scorer.tokenizer, texts, 64)
    assert max(abs(a - b) for a, b in zip(got, expected, strict=True)) < 1e-4
    assert any(0 < x < 25 for x in got) and all(0 <= x <= 25 for x in got)
    alone = load_metricx(settings).score(SRCS[2:3], HYPS[2:3], REFS[2:3] if refs else None)
    assert abs(alone[0] - got[2]) < 1e-4  # a padded batch equals each input alone


def test_the_input_strings_of_each_version():
    assert metricx_input("23", "H", "S", "R") == "candidate: H reference: R"
    assert metricx_input("23", "H", "S", None) == "candidate: H source: S"
    assert metricx_input("24", "H", "S", "R") == "source: S candidate: H reference: R"
    assert metricx_input("24", "H", "S", None) == "source: S candidate: H"


def test_the_eos_is_dropped_and_long_inputs_are_cut(folders):
    scorer = load_metricx(MetricXSettings(model=str(folders / "metricx-24-tiny"),
                                          tokenizer=str(folders / "tokenizer"), max_input_length=64))
    ids = scorer.ids(metricx_input("24", HYPS[2], SRCS[2], REFS[2]))
    assert len(ids) == 63 and scorer.tokenizer.eos_token_id not in ids


def test_versions_and_references_are_checked(folders):
    with pytest.raises(MetricModelError, match="metricx.version: cannot tell"):
        MetricXSettings(model="org/some-regressor").resolved_version()
    assert MetricXSettings(model="google/metricx-23-qe-large-v2p0").resolved_version() == "23"
    settings = MetricXSettings(model=str(folders / "metricx-24-tiny"), tokenizer=str(folders / "tokenizer"),
                               version="23")
    with pytest.raises(MetricModelError, match="reference-based; this test set has no references"):
        load_metricx(settings).score(SRCS, HYPS, None)


def test_a_folder_that_is_no_metricx_model_is_refused(folders, tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    config = read_json(folders / "metricx-24-tiny" / "config.json")
    (small / "config.json").write_text(json.dumps({**config, "vocab_size": 1000}))
    with pytest.raises(MetricModelError, match="has no id 250089"):
        load_metricx(MetricXSettings(model=str(small), tokenizer=str(folders / "tokenizer"), version="24"))
    (small / "config.json").write_text(json.dumps({**config, "model_type": "bart"}))
    with pytest.raises(MetricModelError, match="is not an mT5 model"):
        load_metricx(MetricXSettings(model=str(small), tokenizer=str(folders / "tokenizer"), version="24"))
