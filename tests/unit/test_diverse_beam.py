"""Diverse beam search equals transformers' group beam search (recorded from 4.55, the last release
that ships it: tests/fixtures/diverse_beam/make_fixture.py) on a small trained Marian."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from seqlab.config import ConfigError  # noqa: E402
from seqlab.decoding import DecodingConfig, generate  # noqa: E402
from seqlab.interop import from_hf  # noqa: E402
from seqlab.interop.generation import decoding_of  # noqa: E402
from tests.toy_marian import PAD  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "diverse_beam"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())


@pytest.fixture(scope="module")
def model():
    return from_hf(transformers.MarianMTModel.from_pretrained(FIXTURE / "model").eval())


def config(case: dict) -> DecodingConfig:
    kw = case["generate"]
    return DecodingConfig(method="beam", num_beams=case["num_beams"], num_beam_groups=case["num_beam_groups"],
                          diversity_penalty=case["diversity_penalty"], length_penalty=case["length_penalty"],
                          early_stopping=case["early_stopping"], n_best=case["n_best"], max_length=kw["max_new_tokens"],
                          no_repeat_ngram_size=kw.get("no_repeat_ngram_size"),
                          repetition_penalty=kw.get("repetition_penalty"), force_eos="forced_eos_token_id" in kw)


@pytest.mark.parametrize("index", range(len(EXPECTED["cases"])))
def test_equal_to_transformers_group_beam_search(model, index):
    case = EXPECTED["cases"][index]
    ids, pad = torch.tensor(EXPECTED["source_ids"]), torch.tensor(EXPECTED["source_pad"])
    out = generate(model, ids, pad, config(case))
    n = case["n_best"]
    ref = torch.tensor(case["sequences"]).view(ids.shape[0], n, -1)
    ref_scores = torch.tensor(case["sequences_scores"]).view(ids.shape[0], n)
    for i in range(ids.shape[0]):
        for j in range(n):
            length = int(out.lengths[i, j])
            expected = ref[i, j, 1:].tolist()
            assert out.sequences[i, j, :length].tolist() == expected[:length], (i, j)
            assert all(t == PAD for t in expected[length:])
    assert (out.scores - ref_scores).abs().max() <= 1e-4
    # The n-best lists differ across groups: the point of the method.
    assert any(len({tuple(s) for s in ref[i].tolist()}) == n for i in range(ids.shape[0]))


def test_penalty_makes_groups_differ(model):
    """Without the penalty the groups are copies of one beam search; with it their first tokens differ."""
    ids, pad = torch.tensor(EXPECTED["source_ids"]), torch.tensor(EXPECTED["source_pad"])
    plain = generate(model, ids, pad, DecodingConfig(method="beam", num_beams=2, n_best=2, max_length=10))
    diverse = generate(model, ids, pad, DecodingConfig(method="beam", num_beams=4, num_beam_groups=2,
                                                       diversity_penalty=100.0, n_best=4, max_length=10))
    firsts = diverse.sequences[:, :, 0]
    assert all(len(set(row.tolist())) >= 2 for row in firsts)
    assert plain.sequences.shape[1] == 2


@pytest.mark.parametrize("kw, message", [
    ({"method": "beam", "num_beams": 4, "num_beam_groups": 3, "diversity_penalty": 0.5}, "multiple"),
    ({"method": "beam", "num_beams": 4, "num_beam_groups": 2}, "diversity_penalty"),
    ({"method": "greedy", "num_beam_groups": 2, "diversity_penalty": 0.5}, "method=beam"),
    ({"method": "beam", "num_beams": 4, "diversity_penalty": 0.5}, "num_beam_groups"),
])
def test_invalid_group_settings_are_refused(kw, message):
    with pytest.raises(ConfigError, match=message):
        DecodingConfig(**kw)


def test_generation_config_mapping():
    cfg = decoding_of({"num_beams": 6, "num_beam_groups": 3, "diversity_penalty": 0.5})
    assert (cfg.method, cfg.num_beams, cfg.num_beam_groups, cfg.diversity_penalty) == ("beam", 6, 3, 0.5)
    assert cfg.label == "beam6_lp1_g3_div0.5"


def test_exported_generation_config_keeps_the_groups(model):
    from seqlab.interop.generation import generation_config

    cfg = DecodingConfig(method="beam", num_beams=6, num_beam_groups=3, diversity_penalty=0.5, n_best=3,
                         max_length=12)
    back = decoding_of(generation_config(cfg, model.cfg))
    assert (back.num_beams, back.num_beam_groups, back.diversity_penalty, back.n_best) == (6, 3, 0.5, 3)
