"""Frequency/presence penalties and entropy-adaptive temperatures against llama.cpp's test cases and by hand."""

from __future__ import annotations

import math

import pytest
import torch

from seqlab.config import ConfigError
from seqlab.decoding import DecodingConfig
from seqlab.decoding.adaptive import DynamicTemperature, EntropyTemperature, FrequencyPresencePenalty
from seqlab.decoding.processors import RepetitionPenalty
from seqlab.decoding.registry import build_processors
from seqlab.model import ModelConfig

BOS = 2


def probs_after(processor, probs: list[float], generated: list[int], start: list[int] = (BOS,)) -> list[float]:
    """llama.cpp's test harness: logits = log(probs), apply, softmax; the decoder start token first."""
    scores = torch.tensor([probs]).log()
    prefix = torch.tensor([[*start, *generated]])
    return torch.softmax(processor(prefix, scores).double(), dim=-1)[0].tolist()


# llama.cpp tests/test-sampling.cpp, test_penalties(probs, last_tokens, expected, repeat, freq, present)
PENALTY_CASES = [
    ([0], [0.000011, 0.249997, 0.249997, 0.249997, 0.249997], 1.0, 5.0, 5.0),
    ([0, 1, 2], [0.000023, 0.000023, 0.000023, 0.499966, 0.499966], 1.0, 5.0, 5.0),
    ([0, 1, 2, 0, 0], [0.000000, 0.000023, 0.000023, 0.499977, 0.499977], 1.0, 5.0, 5.0),
    ([0], [0, 0.25, 0.25, 0.25, 0.25], 50.0, 0.0, 0.0),
    ([0, 1, 2], [0, 0, 0, 0.5, 0.5], 50.0, 0.0, 0.0),
    ([0, 1, 2, 0, 0], [0, 0, 0, 0.5, 0.5], 50.0, 0.0, 0.0),
]


@pytest.mark.parametrize(("generated", "expected", "repeat", "freq", "present"), PENALTY_CASES)
def test_penalties_equal_llama_cpp(generated, expected, repeat, freq, present):
    # llama.cpp's token ids 0..4 are ours too. Our penalties never count the decoder start token (2 here);
    # HF's repetition penalty (ours) sees all of input_ids, so its cases get llama.cpp's token list alone.
    if repeat == 1.0:
        got = probs_after(FrequencyPresencePenalty(freq, present), [0.2] * 5, generated)
    else:
        got = probs_after(RepetitionPenalty(repeat), [0.2] * 5, generated, start=[])
    assert got == pytest.approx(expected, abs=1e-5)


def test_penalties_do_not_count_the_start_token_and_leave_input_alone():
    scores = torch.zeros(1, 5)
    out = FrequencyPresencePenalty(1.0, 0.5)(torch.tensor([[BOS, 4, 4]]), scores)
    assert out.tolist() == [[0.0, 0.0, 0.0, 0.0, -2.5]] and scores.abs().sum() == 0


# llama.cpp test_temp_ext(probs, expected, temp, delta, exponent): delta 0 is plain temperature, temp 0 greedy
@pytest.mark.parametrize(("temp", "expected"), [(1.0, [0.1, 0.2, 0.3, 0.4]), (0.0, [0.0, 0.0, 0.0, 1.0])])
def test_dynatemp_equals_llama_cpp_cases(temp, expected):
    assert probs_after(DynamicTemperature(temp, 0.0), [0.1, 0.2, 0.3, 0.4], []) == pytest.approx(expected, abs=1e-6)


def test_dynatemp_by_hand():
    probs = [0.1, 0.2, 0.3, 0.4]
    entropy = -sum(p * math.log(p) for p in probs)
    t = 0.5 + (1.5 - 0.5) * (entropy / math.log(4)) ** 2.0  # t=1, delta=0.5, exponent=2
    z = [math.log(p) / t for p in probs]
    expected = [math.exp(v) / sum(math.exp(w) for w in z) for v in z]
    assert probs_after(DynamicTemperature(1.0, 0.5, 2.0), probs, []) == pytest.approx(expected, abs=1e-6)
    # candidates removed by an earlier processor (-inf) do not count in H_max = ln(n)
    scores = torch.tensor([[math.log(0.25), math.log(0.75), -math.inf]])
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    t = 0.5 + (h / math.log(2))
    out = DynamicTemperature(1.0, 0.5)(torch.tensor([[BOS]]), scores)
    assert out[0, :2].tolist() == pytest.approx([math.log(0.25) / t, math.log(0.75) / t], abs=1e-6)
    assert out[0, 2] == -math.inf


def test_edt_by_hand():
    probs = [0.1, 0.2, 0.3, 0.4]
    entropy = -sum(p * math.log(p) for p in probs)
    t = 0.7 * 0.8 ** (1.5 / entropy)  # T0=0.7, N=0.8, theta=1.5
    out = EntropyTemperature(0.7, 1.5, 0.8)(torch.tensor([[BOS]]), torch.tensor([probs]).log())
    assert out[0].tolist() == pytest.approx([math.log(p) / t for p in probs], abs=1e-6)
    certain = EntropyTemperature(1.0, 1.0)(torch.tensor([[BOS]]), torch.tensor([[0.0, -math.inf, -math.inf]]))
    assert certain[0, 0] == 0.0 and torch.isinf(certain[0, 1:]).all()  # H = 0: the best token only


def test_registry_builds_them_in_place_of_temperature_and_validates():
    ids = ModelConfig(src_vocab_size=10)
    kinds = [type(p).__name__ for p in build_processors(DecodingConfig(
        method="sample", temperature=0.8, dynatemp_range=0.3, top_k=5, frequency_penalty=0.5), ids)]
    assert kinds == ["FrequencyPresencePenalty", "SuppressTokens", "DynamicTemperature", "TopK"]
    assert DecodingConfig(method="sample", edt_theta=1.0).label == "sample_edt_theta1"
    for bad, message in ((dict(method="sample", dynatemp_range=0.5, edt_theta=1.0), "two temperature rules"),
                         (dict(method="greedy", edt_theta=1.0), "only applies to method=sample"),
                         (dict(method="sample", edt_theta=1.0, edt_base=1.5), "edt_base=1.5"),
                         (dict(frequency_penalty=math.inf), "frequency_penalty=inf")):
        with pytest.raises(ConfigError, match=message):
            DecodingConfig(**bad)
