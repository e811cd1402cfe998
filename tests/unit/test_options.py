"""Every DecodingConfig option is declared (decoding.options), and each engine and export format either maps
it (its request changes) or refuses it by name: no option is silently ignored."""

from __future__ import annotations

from dataclasses import dataclass, fields

import pytest
import torch

from seqlab.config import ConfigError
from seqlab.decoding import DecodingConfig
from seqlab.decoding.options import MAPPED, Inert, declared, digest_neutral, refusals
from seqlab.engines.ct2 import check_decodable, requests
from seqlab.interop.generation import generation_config
from seqlab.model import ModelConfig

MODEL = ModelConfig(src_vocab_size=40, d_model=16, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=32,
                    max_positions=64)
SOURCES = torch.tensor([[False] * 9, [False] * 4 + [True] * 5])  # (2, 9) pad masks: sources of 9 and 4 tokens
BEAM = {"method": "beam", "num_beams": 4, "suppress_special": False}  # CTranslate2 takes it (no ban)
SAMPLE = {"method": "sample"}
# field -> cases of (the setting around it, its value there[, what must be set with it]); the setting alone is
# the baseline the value must change
CASES: dict[str, list[tuple[dict, object]]] = {
    "method": [({}, "sample")],
    "num_beams": [({"method": "beam", "suppress_special": False}, 3)],
    "n_best": [(BEAM, 2)],
    "length_penalty": [(BEAM, 0.6), (BEAM, 0.0)],
    "num_beam_groups": [(BEAM, 2, {"diversity_penalty": 0.5})],
    "diversity_penalty": [(BEAM, 0.5, {"num_beam_groups": 2})],
    "early_stopping": [(BEAM, False), (BEAM, "never")],
    "min_length": [({}, 3), (BEAM, 3)],
    "max_length": [({}, 7), (BEAM, 7)],
    "max_len_a": [({}, 2.0), (BEAM, 2.0)],
    "max_len_b": [({}, 20), (BEAM, 20)],
    "no_repeat_ngram_size": [({}, 2), (BEAM, 2), ({"suppress_special": False}, 2)],
    "repetition_penalty": [({}, 1.2)],
    "frequency_penalty": [({}, 0.5)],
    "presence_penalty": [({}, 0.5)],
    "temperature": [(SAMPLE, 0.7)],
    "top_k": [(SAMPLE, 5)],
    "top_p": [(SAMPLE, 0.9)],
    "min_p": [(SAMPLE, 0.1)],
    "typical_p": [(SAMPLE, 0.9)],
    "epsilon": [(SAMPLE, 0.01)],
    "eta": [(SAMPLE, 0.01)],
    "top_n_sigma": [(SAMPLE, 1.0)],
    "dynatemp_range": [(SAMPLE, 0.5)],
    "dynatemp_exponent": [(SAMPLE, 2.0), (SAMPLE, 2.0, {"dynatemp_range": 0.5})],
    "edt_theta": [(SAMPLE, 1.0)],
    "edt_base": [(SAMPLE, 0.5), (SAMPLE, 0.5, {"edt_theta": 1.0})],
    "penalty_alpha": [({}, 0.6, {"method": "contrastive", "top_k": 4})],
    "force_eos": [({}, "hf"), ({}, "fairseq"), (BEAM, "hf")],
    "bad_words_ids": [({}, [[5]]), (BEAM, [[5], [6, 7]])],
    "sequence_bias": [({}, [[[5], 1.0]])],
    "suppress_tokens": [({}, [5]), (BEAM, [5])],
    "forced_bos_token_id": [({}, 5)],
    "suppress_special": [({}, False), (BEAM, True)],
    "renormalize_logits": [({}, True), (BEAM, True)],
    "prefix_size": [({}, 1)],
    "length_rule": [(BEAM, "wu")],
    "coverage_penalty": [(BEAM, "wu", {"coverage_beta": 0.2})],
    "coverage_beta": [(BEAM, 0.3, {"coverage_penalty": "summary"})],
    "constraints": [(BEAM, "ordered")],
    "constraint_words": [(BEAM, 2, {"constraints": "unordered"})],
    "seed": [(SAMPLE, 3)],
    "name": [({}, "mine")],
    "mbr": [(SAMPLE, {"utility": "chrf", "candidates": 4}), ({"method": "beam", "num_beams": 4, "suppress_special":
                                                               False}, {"utility": "chrf", "candidates": 4})],
    "draft": [({}, "lookup"), ({}, "ckpt:draft.ckpt")],
    "draft_tokens": [({}, 3, {"draft": "lookup"})],
    "draft_schedule": [({}, "adaptive", {"draft": "lookup"})],
    "lookup_ngram": [({}, 3, {"draft": "lookup"})],
    "draft_positions": [({}, "all", {"draft": "lookup"})],
}


def ct2_request(cfg: DecodingConfig) -> object:
    return [(r.rows, r.limits, r.options, r.banned) for r in requests(cfg, MODEL, SOURCES)]


MAPPINGS = {"ctranslate2": ct2_request, "hf": lambda cfg: generation_config(cfg, MODEL)}


def test_every_field_is_declared_and_walked():
    names = {f.name for f in fields(DecodingConfig)}
    assert all(declared(DecodingConfig).values())
    assert set(CASES) == names


def cases():
    for key, items in CASES.items():
        for around, value, *also in items:
            for consumer in MAPPINGS:
                yield pytest.param(key, around, value, also[0] if also else {}, consumer,
                                   id=f"{consumer}-{key}={value!r}-{around}-{also}")


@pytest.mark.parametrize(("key", "around", "value", "also", "consumer"), list(cases()))
def test_each_consumer_maps_or_refuses_by_name(key, around, value, also, consumer):
    """Where a consumer takes the setting around it, the option either changes the consumer's request
    (mapped), is declared inert with a reason, or is refused with a message that names it."""
    base = DecodingConfig(**around)
    if refusals(base, consumer):  # sampling on CTranslate2, say: refused as a whole, by its own key
        return
    cfg = DecodingConfig(**{**around, **also, key: value})
    problems = refusals(cfg, consumer)
    if problems:
        assert any(f"decoding.{key}" in p for p in problems), problems
        with pytest.raises(ConfigError, match=f"decoding.{key}"):
            (check_decodable if consumer == "ctranslate2" else MAPPINGS["hf"])(cfg)
        return
    rule = getattr(declared(DecodingConfig)[key], consumer)
    if isinstance(rule, Inert):
        assert rule.why
        return
    assert rule is MAPPED or callable(rule)
    assert MAPPINGS[consumer](cfg) != MAPPINGS[consumer](base), f"{consumer} ignores decoding.{key}={value!r}"


def test_every_field_is_walked_on_both_consumers():
    """Each field has a case that a consumer takes the setting around (so the walk above tests something)."""
    sampling = {key for key, items in CASES.items() if all(a.get("method") == "sample" for a, *_ in items)}
    for consumer in MAPPINGS:
        walked = {key for key, items in CASES.items() for around, *_ in items
                  if not refusals(DecodingConfig(**around), consumer)}
        # CTranslate2 refuses sampling as a whole, by decoding.method (test_each_consumer_maps_or_refuses_by_name)
        assert walked | (sampling if consumer == "ctranslate2" else set()) == set(CASES), (consumer,
                                                                                         set(CASES) - walked)


def test_the_options_archived_digests_leave_out():
    """Stages archived before these options existed keep their digests (app.runner.NEUTRAL)."""
    assert digest_neutral(DecodingConfig) == {
        "bad_words_ids": None, "sequence_bias": None, "suppress_tokens": None, "forced_bos_token_id": None,
        "suppress_special": True, "renormalize_logits": False, "length_rule": "power", "coverage_penalty": None,
        "coverage_beta": 0.0, "penalty_alpha": None, "prefix_size": 0, "constraints": None, "constraint_words": 0,
        "draft": None, "draft_tokens": 5, "draft_schedule": "fixed", "lookup_ngram": 2, "draft_positions": "paying"}


@dataclass(frozen=True)
class Undeclared(DecodingConfig):
    n_best: int = 1  # the field without its declaration


def test_an_undeclared_option_is_refused_by_every_consumer():
    """A field nobody declared (here: `n_best`, redeclared without its Option) is refused, never ignored."""
    cfg = Undeclared(**BEAM, n_best=2)
    for consumer in MAPPINGS:
        assert any("decoding.n_best=2" in p for p in refusals(cfg, consumer))


def test_ctranslate2_beam_needs_renormalized_bans_and_early_stopping():
    beam = {"method": "beam", "num_beams": 4}
    with pytest.raises(ConfigError, match="renormalize_logits=true"):
        check_decodable(DecodingConfig(**beam))  # seqlab's pad/start ban, before CTranslate2's softmax
    check_decodable(DecodingConfig(**beam, renormalize_logits=True))
    check_decodable(DecodingConfig(**beam, suppress_special=False))
    with pytest.raises(ConfigError, match="early_stopping"):
        check_decodable(DecodingConfig(**beam, suppress_special=False, early_stopping="never"))
    check_decodable(DecodingConfig(min_length=3, no_repeat_ngram_size=2))  # greedy: argmax is the same


def test_ctranslate2_beam_decodes_each_length_limit_apart():
    """fairseq's per-source limits: greedy decodes the batch to its longest limit and cuts, beam search calls
    CTranslate2 once per limit."""
    greedy = requests(DecodingConfig(), MODEL, SOURCES)
    beam = requests(DecodingConfig(**BEAM), MODEL, SOURCES)
    assert [(r.rows, r.limits, r.options["max_decoding_length"]) for r in greedy] == [([0, 1], [20, 14], 20)]
    assert [(r.rows, r.limits, r.options["max_decoding_length"]) for r in beam] == [([1], [14], 14),
                                                                                    ([0], [20], 20)]
