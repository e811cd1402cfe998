"""docs/ARCHITECTURE.md's row for a search method, checked: a method added the way it says (one declaration in
decoding.methods, nothing else) validates, decodes, names itself in labels, counts its rows, and is refused by
name by CTranslate2 and generation_config.json, which nobody taught it; an undeclared value is refused."""

from __future__ import annotations

import pytest
import torch

from seqlab.config import ConfigError
from seqlab.data.sequences import pad_right
from seqlab.decoding import DecodingConfig, generate
from seqlab.decoding.methods import METHODS, SearchMethod, method_of
from seqlab.decoding.options import refusals
from seqlab.engines.ct2 import check_decodable
from seqlab.interop.generation import generation_config
from seqlab.model import ModelConfig, build_model

# the fixture: beam search's search under a declaration of its own, mapped for no engine or format
WIDEST = SearchMethod("widest", label=lambda cfg: f"widest{cfg.num_beams}",
                      run=lambda search, keys, hook: search.beams(hook), beams=True)
TINY = ModelConfig(src_vocab_size=20, d_model=16, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=32,
                   dropout=0.0, max_positions=32)


@pytest.fixture
def widest(monkeypatch):
    monkeypatch.setitem(METHODS, "widest", WIDEST)


def test_an_undeclared_method_is_refused_with_the_declared_ones():
    with pytest.raises(ConfigError, match="decoding.method='widest' is not valid .*; use one of greedy, beam"):
        DecodingConfig(method="widest")


def test_the_declared_method_validates_labels_and_counts_its_rows(widest):
    cfg = DecodingConfig(method="widest", num_beams=4, n_best=2)
    assert method_of(cfg) is WIDEST
    assert cfg.label == "widest4"
    assert cfg.rows_per_source == 4  # its rows are a source's beams, as declared
    with pytest.raises(ConfigError, match="only applies to method=sample"):  # it does not draw
        DecodingConfig(method="widest", num_beams=4, top_p=0.9)
    with pytest.raises(ConfigError, match="draft speculates"):
        DecodingConfig(method="widest", num_beams=4, draft="lookup")


def test_the_declared_method_decodes_with_its_search(widest):
    torch.manual_seed(0)
    model = build_model(TINY).eval()
    src, pad = pad_right([[5, 6, 8, 3], [9, 3]], 0)
    out = generate(model, src, pad, DecodingConfig(method="widest", num_beams=3, n_best=2, max_length=6))
    beam = generate(model, src, pad, DecodingConfig(method="beam", num_beams=3, n_best=2, max_length=6))
    assert out.sequences.shape[:2] == (2, 2)
    assert torch.equal(out.sequences, beam.sequences) and torch.equal(out.scores, beam.scores)


def test_engines_and_exports_refuse_it_by_name_until_taught(widest):
    cfg = DecodingConfig(method="widest", num_beams=3)
    for consumer in ("ctranslate2", "hf"):
        assert any("decoding.method=widest" in p for p in refusals(cfg, consumer)), consumer
    with pytest.raises(ConfigError, match="decoding.method=widest: CTranslate2 has no such method"):
        check_decodable(cfg)
    with pytest.raises(ConfigError, match="decoding.method=widest: Hugging Face's generate has no such method"):
        generation_config(cfg, TINY)


def test_every_declared_method_has_a_label_and_a_search():
    for name, method in METHODS.items():
        assert method.name == name and callable(method.label) and callable(method.run)
