"""Contrastive search equals transformers' (recorded from 4.55, the last release that ships it:
tests/fixtures/contrastive/make_fixture.py) on a trained Marian and tiny mBART and T5 v1.1 models, token for
token; and its own properties: alpha 0 is greedy search, a padded row equals its source alone, bad values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from seqlab.config import ConfigError  # noqa: E402
from seqlab.decoding import DecodingConfig, generate  # noqa: E402
from seqlab.decoding.contrastive import degeneration_choice  # noqa: E402
from seqlab.interop import from_hf  # noqa: E402
from seqlab.interop.generation import decoding_of  # noqa: E402
from seqlab.interop.hf import from_state  # noqa: E402
from seqlab.interop.hf_folder import read_json, read_weights  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EXPECTED = json.loads((FIXTURES / "contrastive" / "expected.json").read_text())
FOLDERS = {"marian": FIXTURES / "diverse_beam" / "model", "mbart": FIXTURES / "contrastive" / "mbart",
           "t5_v1.1": FIXTURES / "contrastive" / "t5_v1.1"}


@pytest.fixture(scope="module")
def models():
    marian = from_hf(transformers.MarianMTModel.from_pretrained(FOLDERS["marian"]).eval())
    out = {"marian": marian}
    for name in ("mbart", "t5_v1.1"):
        folder = FOLDERS[name]
        out[name] = from_state(read_json(folder / "config.json"), read_weights(folder), str(folder))
    return out


def settings(case: dict) -> DecodingConfig:
    """The case's DecodingConfig as transformers saw it: the model's generation_config.json and the call's."""
    given = {**read_json(FOLDERS[case["model"]] / "generation_config.json"), **case["generate"]}
    return decoding_of(given)


def hf_tokens(row: list[int], eos: int) -> list[int]:
    """transformers' row without its decoder start token, up to its EOS (padding follows it; a row that
    reached the length limit has neither)."""
    tokens = row[1:]
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens


@pytest.mark.parametrize("index", range(len(EXPECTED["cases"])))
def test_equal_to_transformers_contrastive_search(models, index):
    case = EXPECTED["cases"][index]
    model = models[case["model"]]
    cfg = settings(case)
    assert cfg.method == "contrastive" and cfg.top_k == case["generate"]["top_k"]
    ids, pad = torch.tensor(case["source_ids"]), torch.tensor(case["source_pad"])
    out = generate(model, ids, pad, cfg)
    for i, row in enumerate(case["sequences"]):
        ours = out.sequences[i, 0, : out.lengths[i, 0]].tolist()
        assert ours == hf_tokens(row, model.cfg.eos_id), (case["model"], case["generate"], i)


def test_the_fixture_is_not_greedy_search(models):
    """The recorded outputs differ from greedy search's somewhere, or the comparison would prove little."""
    differs = 0
    for case in EXPECTED["cases"]:
        model, cfg = models[case["model"]], settings(case)
        ids, pad = torch.tensor(case["source_ids"]), torch.tensor(case["source_pad"])
        greedy = generate(model, ids, pad, DecodingConfig(**{**cfg.to_dict(), "method": "greedy",
                                                             "penalty_alpha": None, "top_k": None}))
        differs += int(not torch.equal(greedy.sequences[:, 0, : out_width(greedy)],
                                       generate(model, ids, pad, cfg).sequences[:, 0, : out_width(greedy)]))
    assert differs >= 3


def out_width(out) -> int:
    return int(out.lengths.max())


def test_alpha_zero_is_greedy_and_rows_equal_their_source_alone(models):
    model = models["marian"]
    case = EXPECTED["cases"][0]
    ids, pad = torch.tensor(case["source_ids"]), torch.tensor(case["source_pad"])
    greedy = generate(model, ids, pad, DecodingConfig(max_length=12))
    zero = generate(model, ids, pad, DecodingConfig(method="contrastive", penalty_alpha=0.0, top_k=5, max_length=12))
    assert torch.equal(greedy.sequences, zero.sequences)
    cfg = DecodingConfig(method="contrastive", penalty_alpha=0.6, top_k=4, max_length=12)
    batched = generate(model, ids, pad, cfg)
    for i in range(ids.shape[0]):
        keep = ~pad[i]
        alone = generate(model, ids[i : i + 1, keep], pad[i : i + 1, keep], cfg)
        n = int(alone.lengths[0, 0])
        assert alone.sequences[0, 0, :n].tolist() == batched.sequences[i, 0, :n].tolist()
        torch.testing.assert_close(alone.token_logprobs[0, 0, :n], batched.token_logprobs[i, 0, :n])


def test_degeneration_choice_by_hand():
    """Two candidates: the likelier repeats the context's direction (cosine 1), the other is orthogonal."""
    context = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]])  # (1, L=2, d=2)
    candidates = torch.tensor([[[3.0, 0.0], [1.0, -1.0]]])  # cos: 1 with the first; max(0.707, -0.707)
    probs = torch.tensor([[0.7, 0.3]])
    # alpha 0.5: 0.5 * 0.7 - 0.5 * 1 = -0.15 against 0.5 * 0.3 - 0.5 * 0.7071 = -0.2036: the first
    assert degeneration_choice(context, candidates, probs, 0.5).tolist() == [0]
    # alpha 0.8: 0.2 * 0.7 - 0.8 = -0.66 against 0.2 * 0.3 - 0.8 * 0.7071 = -0.5057: the second
    assert degeneration_choice(context, candidates, probs, 0.8).tolist() == [1]


@pytest.mark.parametrize("kwargs,message", [
    (dict(method="contrastive", penalty_alpha=1.5, top_k=4), r"penalty_alpha=1.5 must be in \[0, 1\]"),
    (dict(method="contrastive", penalty_alpha=-0.1, top_k=4), r"penalty_alpha=-0.1 must be in \[0, 1\]"),
    (dict(method="contrastive", penalty_alpha=0.6), "top_k=None: contrastive search ranks"),
    (dict(method="greedy", penalty_alpha=0.6), "penalty_alpha=0.6 is contrastive search's"),
    (dict(method="contrastive", penalty_alpha=0.6, top_k=4, top_p=0.9), "top_p only applies to method=sample"),
    (dict(method="contrastive", penalty_alpha=0.6, top_k=4, mbr={"candidates": 4}), "not method=contrastive"),
])
def test_bad_values_name_the_key(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        DecodingConfig(**kwargs)


def test_label_engines_and_export():
    from seqlab.engines.ct2 import check_decodable
    from seqlab.interop.generation import generation_config
    from seqlab.model import ModelConfig

    cfg = DecodingConfig(method="contrastive", penalty_alpha=0.6, top_k=4, no_repeat_ngram_size=3)
    assert cfg.label == "contrastive_a0.6_k4_norepeat3"
    with pytest.raises(ConfigError, match="engine=ctranslate2"):
        check_decodable(cfg)
    exported = generation_config(cfg, ModelConfig(src_vocab_size=40))
    assert (exported["penalty_alpha"], exported["top_k"], exported["do_sample"]) == (0.6, 4, False)
    back = decoding_of(exported)  # seqlab's pad/start rule comes back as suppress_tokens
    assert (back.method, back.penalty_alpha, back.top_k, back.no_repeat_ngram_size) == ("contrastive", 0.6, 4, 3)
