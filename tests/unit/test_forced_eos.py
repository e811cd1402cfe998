"""Forced EOS, both rules, against their references' own test cases.

fairseq: `tests/test_sequence_generator.py` (TestSequeneceGenerator) decodes a toy model whose
next-token distribution depends only on (step, sentence, beam slot) (`tests/utils.py`,
`sequence_generator_setup`); the tables and expected hypotheses are restated here. Its vocabulary
is bos=0, pad=1, eos=2, unk=3, w1=4, w2=5. fairseq's `max_len_b=2` allows 2 tokens before the
forced EOS: seqlab's max_length counts the EOS, so it is 3.
"""

from __future__ import annotations

import math

import pytest
import torch

from seqlab.config import ConfigError
from seqlab.constants import SpecialIds
from seqlab.decoding import DecodingConfig
from seqlab.decoding.beam import beam_search
from seqlab.decoding.processors import SuppressTokens
from seqlab.decoding.search import LengthPenalty, force_eos_, sample_or_greedy

EOS, W1, W2 = 2, 4, 5
IDS = SpecialIds(pad_id=1, bos_id=0, eos_id=EOS)
UNK = 0.0
# beam_probs[step][2 * sentence + slot] = probabilities of (eos, unk, w1, w2)
BEAM_PROBS = [
    [[0.0, UNK, 0.9, 0.1], [0.0, UNK, 0.9, 0.1], [0.0, UNK, 0.7, 0.3], [0.0, UNK, 0.7, 0.3]],
    [[1.0, UNK, 0.0, 0.0], [0.0, UNK, 0.9, 0.1], [0.25, UNK, 0.35, 0.4], [0.00, UNK, 0.10, 0.9]],
    [[0.0, UNK, 0.1, 0.9], [0.6, UNK, 0.2, 0.2], [0.60, UNK, 0.4, 0.00], [0.01, UNK, 0.0, 0.99]],
    [[1.0, UNK, 0.0, 0.0], [1.0, UNK, 0.0, 0.0], [0.1, UNK, 0.5, 0.4], [1.0, UNK, 0.0, 0.0]],
]


class SlotCache:
    """Stands in for a DecoderCache: remembers which (sentence, slot) each row is and the step."""

    def __init__(self, sentences: int, beams: int) -> None:
        self.sentence = torch.arange(sentences)  # one row per sentence until expand_ (as beam search starts)
        self.beams, self.t = beams, 0

    def expand_(self, group: int) -> None:
        self.sentence = self.sentence.repeat_interleave(group)

    def compact_(self, rows: torch.Tensor, kept: torch.Tensor | None = None, same_sources: bool = False) -> None:
        self.sentence = self.sentence[rows]


def toy_step(last: torch.Tensor, cache: SlotCache) -> tuple[torch.Tensor, SlotCache]:
    """(N,) -> (N, 6) log-probs: fairseq's TestIncrementalDecoder (EOS only after the tables end)."""
    n = last.shape[0]
    probs = torch.zeros(n, 6)
    slot = torch.arange(n) % cache.beams if cache.t > 0 else torch.zeros(n, dtype=torch.long)  # one row each at first
    if cache.t < len(BEAM_PROBS):
        table = torch.tensor(BEAM_PROBS[cache.t])
        probs[:, EOS:] = table[cache.sentence * cache.beams + slot]
    else:
        probs[:, EOS] = 1.0
    cache.t += 1
    return probs.log(), cache


def fairseq_search(max_length: int | None, length_penalty: float = 1.0, rule: str | None = "fairseq"):
    limit = torch.full((2,), max_length or 20)
    return beam_search(toy_step, SlotCache(2, 2), ids=IDS, max_new=limit, num_beams=2,
                       length_penalty=LengthPenalty(length_penalty), early_stopping=True,
                       processors=[SuppressTokens([IDS.pad_id, IDS.bos_id])], force_eos=rule)


def expected_score(probs: list[float], length_penalty: float = 1.0) -> float:
    return sum(math.log(p) for p in probs) / len(probs) ** length_penalty


def check(out, sentence: int, beam: int, tokens: list[int], probs: list[float], length_penalty: float = 1.0):
    n = int(out.lengths[sentence, beam])
    assert out.sequences[sentence, beam, :n].tolist() == tokens
    assert torch.allclose(out.token_logprobs[sentence, beam, :n], torch.tensor(probs).log(), atol=1e-4)
    assert abs(float(out.scores[sentence, beam]) - expected_score(probs, length_penalty)) < 1e-5


def test_fairseq_maxlen():
    """fairseq's test_maxlen: the forced EOS keeps its log-prob, and "w2 w1" (EOS impossible) cannot end."""
    out = fairseq_search(max_length=3)
    check(out, 0, 0, [W1, EOS], [0.9, 1.0])
    check(out, 0, 1, [W2, W2, EOS], [0.1, 0.1, 0.6])
    check(out, 1, 0, [W1, W2, EOS], [0.7, 0.4, 0.6])
    check(out, 1, 1, [W2, W2, EOS], [0.3, 0.9, 0.01])


def test_hf_rule_on_the_same_case_scores_forced_eos_zero():
    """Hugging Face's rule ranks by the tokens before the forced EOS: other scores, another second hypothesis."""
    out = fairseq_search(max_length=3, rule="hf")
    assert abs(float(out.scores[1, 0]) - (math.log(0.7) + math.log(0.4)) / 3) < 1e-5  # -0.42, fairseq's -0.59
    n = int(out.lengths[0, 1])
    assert out.sequences[0, 1, :n].tolist() == [W2, W1, EOS]  # fairseq: [w2, w2, eos]


@pytest.mark.parametrize(("length_penalty", "expected"), [
    (1.0, [[[W1, EOS], [0.9, 1.0]], [[W2, W1, W2, EOS], [0.1, 0.9, 0.9, 1.0]],
           [[W1, W2, W1, EOS], [0.7, 0.4, 0.4, 1.0]], [[W1, W2, EOS], [0.7, 0.4, 0.6]]]),
    (0.6, [[[W1, EOS], [0.9, 1.0]], [[W2, W1, W2, EOS], [0.1, 0.9, 0.9, 1.0]],
           [[W1, W2, EOS], [0.7, 0.4, 0.6]], [[W1, W2, W1, EOS], [0.7, 0.4, 0.4, 1.0]]]),
    (5.0, [[[W2, W1, W2, EOS], [0.1, 0.9, 0.9, 1.0]], [[W1, EOS], [0.9, 1.0]],
           [[W1, W2, W1, EOS], [0.7, 0.4, 0.4, 1.0]], [[W1, W2, EOS], [0.7, 0.4, 0.6]]]),
])
def test_fairseq_normalization_and_length_penalty_cases(length_penalty, expected):
    """fairseq's test_with_normalization / test_with_lenpen_favoring_{short,long}_hypos (no length limit)."""
    out = fairseq_search(max_length=None, length_penalty=length_penalty)
    for i, (tokens, probs) in enumerate(expected):
        check(out, i // 2, i % 2, tokens, probs, length_penalty)


def test_rules_differ_only_at_the_limit():
    scores = torch.log_softmax(torch.randn(3, 6), -1)
    at_limit = torch.tensor([False, True, True])
    hf = force_eos_(scores.clone(), at_limit, EOS, "hf")
    fs = force_eos_(scores.clone(), at_limit, EOS, "fairseq")
    assert torch.equal(hf[0], scores[0]) and torch.equal(fs[0], scores[0])
    assert hf[1:, EOS].tolist() == [0.0, 0.0] and torch.equal(fs[1:, EOS], scores[1:, EOS])
    others = torch.ones(6, dtype=torch.bool)
    others[EOS] = False
    assert torch.isinf(hf[1:][:, others]).all() and torch.isinf(fs[1:][:, others]).all()


@pytest.mark.parametrize("rule", ["hf", "fairseq"])
def test_greedy_ends_with_eos_at_the_limit_under_both_rules(rule):
    def step(last, cache):
        probs = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.6, 0.4]]).repeat(last.shape[0], 1)  # EOS impossible
        return probs.log(), cache

    out = sample_or_greedy(step, SlotCache(1, 1), ids=IDS, max_new=torch.tensor([3]),
                           processors=[SuppressTokens([1, 0])], keys=None, seed=0, force_eos=rule)
    assert out.sequences[0, 0].tolist() == [W1, W1, EOS]


def test_force_eos_values():
    assert DecodingConfig(force_eos=True).force_eos == "hf"  # what `true` always meant
    assert DecodingConfig(force_eos="fairseq").force_eos == "fairseq"
    assert DecodingConfig().force_eos is False
    with pytest.raises(ConfigError, match="decoding.force_eos='always'"):
        DecodingConfig(force_eos="always")
