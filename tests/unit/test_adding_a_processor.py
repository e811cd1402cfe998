"""docs/ARCHITECTURE.md's row for a logits processor, checked: a processor added the way it says (a class and its
field's declaration, nothing else) is built at its place in Hugging Face's order, acts in every search, names
itself in labels, enters archived digests, and is refused by name by CTranslate2 and generation_config.json,
which nobody taught it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import Tensor

from seqlab.config import ConfigError
from seqlab.constants import DEFAULT_IDS
from seqlab.data.sequences import pad_right
from seqlab.decoding import DecodingConfig, generate
from seqlab.decoding.options import digest_neutral, option, refusals
from seqlab.decoding.processors import LogitsProcessor
from seqlab.decoding.registry import build_processors, builders, each
from seqlab.engines.ct2 import check_decodable
from seqlab.interop.generation import generation_config
from seqlab.model import ModelConfig, build_model

FAVOURITE = 7


class Boost(LogitsProcessor):
    """Adds `amount` to one token's score: the fixture processor."""

    def __init__(self, amount: float) -> None:
        if amount < 0:
            raise ConfigError(f"decoding.boost={amount} must be >= 0")
        self.amount = amount

    def __call__(self, prefix: Tensor, scores: Tensor) -> Tensor:
        out = scores.clone()
        out[:, FAVOURITE] += self.amount
        return out


@dataclass(frozen=True)
class WithBoost(DecodingConfig):
    # the one declaration: after the repetition penalty (20), before the frequency penalties (30)
    boost: float | None = option(None, label="boost", processor=each(Boost, 25))


def test_the_new_processor_is_built_at_its_place_and_validated():
    cfg = WithBoost(boost=2.0, repetition_penalty=1.2, frequency_penalty=0.5)
    kinds = [type(p).__name__ for p in build_processors(cfg, DEFAULT_IDS)]
    assert kinds.index("RepetitionPenalty") < kinds.index("Boost") < kinds.index("FrequencyPresencePenalty")
    assert "Boost" not in [type(p).__name__ for p in build_processors(WithBoost(), DEFAULT_IDS)]
    with pytest.raises(ConfigError, match="decoding.boost=-1"):
        WithBoost(boost=-1.0)


def test_every_builder_has_its_own_place_in_the_order():
    orders = [b.order for b in builders(WithBoost).values()]
    assert len(orders) == len(set(orders))


def test_the_new_processor_acts_in_greedy_beam_and_sampling():
    torch.manual_seed(0)
    model = build_model(ModelConfig(src_vocab_size=20, d_model=16, n_heads=2, encoder_layers=1, decoder_layers=1,
                                    d_ff=32, dropout=0.0, max_positions=32)).eval()
    src, pad = pad_right([[5, 6, 8, 3], [9, 3]], 0)
    for base in ({}, {"method": "beam", "num_beams": 3}, {"method": "sample", "seed": 1}):
        out = generate(model, src, pad, WithBoost(max_length=6, min_length=6, boost=100.0, **base))
        assert (out.sequences[:, 1:7] == FAVOURITE).all(), base


def test_the_new_processor_names_itself_and_enters_digests():
    assert WithBoost(boost=2.0).label == "greedy_boost2"
    assert "boost" not in digest_neutral(WithBoost)  # archived stages never had it: its digest carries it


def test_engines_and_exports_refuse_it_by_name_until_taught():
    cfg = WithBoost(boost=2.0)
    for consumer in ("ctranslate2", "hf"):
        assert any("decoding.boost=2.0" in p for p in refusals(cfg, consumer)), consumer
    assert refusals(WithBoost(), "ctranslate2") == refusals(DecodingConfig(), "ctranslate2")
    with pytest.raises(ConfigError, match="decoding.boost"):
        check_decodable(cfg)
    model = ModelConfig(src_vocab_size=20, d_model=16, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=32)
    with pytest.raises(ConfigError, match="decoding.boost"):
        generation_config(cfg, model)
