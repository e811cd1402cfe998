"""Each logits processor alone, against its Hugging Face counterpart on random logits."""

from __future__ import annotations

import pytest
import torch

from seqlab.config import ConfigError
from seqlab.decoding import processors as P

hf = pytest.importorskip("transformers.generation.logits_process")


def random_scores(seed: int = 0, n: int = 6, v: int = 50) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(n, v, generator=g) * 3
    scores[0, :5] = 1.0  # ties
    scores[1, 3] = float("-inf")  # an already-removed token
    return scores


def prefix(seed: int = 1, n: int = 6, t: int = 12, v: int = 50) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 8, (n, t), generator=g)  # small range: many repeats and n-grams
    ids[:, 0] = 2
    return ids


PAIRS = [
    (P.Temperature(0.7), hf.TemperatureLogitsWarper(0.7)),
    (P.Temperature(1.5), hf.TemperatureLogitsWarper(1.5)),
    (P.TopK(1), hf.TopKLogitsWarper(1)),
    (P.TopK(10), hf.TopKLogitsWarper(10)),
    (P.TopP(0.9), hf.TopPLogitsWarper(0.9)),
    (P.TopP(0.5), hf.TopPLogitsWarper(0.5)),
    (P.MinP(0.1), hf.MinPLogitsWarper(0.1)),
    (P.Typical(0.9), hf.TypicalLogitsWarper(0.9)),
    (P.Typical(0.2), hf.TypicalLogitsWarper(0.2)),
    (P.EpsilonCutoff(3e-2), hf.EpsilonLogitsWarper(3e-2)),
    (P.EtaCutoff(2e-2), hf.EtaLogitsWarper(2e-2)),
    (P.RepetitionPenalty(1.3), hf.RepetitionPenaltyLogitsProcessor(1.3)),
    (P.RepetitionPenalty(0.8), hf.RepetitionPenaltyLogitsProcessor(0.8)),
    (P.NoRepeatNGram(1), hf.NoRepeatNGramLogitsProcessor(1)),
    (P.NoRepeatNGram(2), hf.NoRepeatNGramLogitsProcessor(2)),
    (P.NoRepeatNGram(3), hf.NoRepeatNGramLogitsProcessor(3)),
    (P.MinNewTokens(20, eos_id=3), hf.MinNewTokensLengthLogitsProcessor(1, 20, 3)),
    (P.MinNewTokens(5, eos_id=3), hf.MinNewTokensLengthLogitsProcessor(1, 5, 3)),
    # banned words: one-token and longer sequences (their last token banned after the rest); EOS alone dropped
    (P.BadWords([[7], [4, 5], [1, 2, 6], [3]], eos_id=3),
     hf.NoBadWordsLogitsProcessor([[7], [4, 5], [1, 2, 6], [3]], eos_token_id=3)),
    # sequence bias: positive and negative, one-token and longer, two sequences ending in the same token
    (P.SequenceBias([[[7], 2.5], [[4, 5], -3.0], [[1, 5], 1.25], [[0, 2, 6], 4.0]]),
     hf.SequenceBiasLogitsProcessor([[[7], 2.5], [[4, 5], -3.0], [[1, 5], 1.25], [[0, 2, 6], 4.0]])),
    # a sequence given twice: the last bias wins (HF keeps a dict of sequences)
    (P.SequenceBias([[[5], 6.0], [[5], -6.0], [[2, 6], 1.0], [[2, 6], 3.0]]),
     hf.SequenceBiasLogitsProcessor([[[5], 6.0], [[5], -6.0], [[2, 6], 1.0], [[2, 6], 3.0]])),
    (P.ForcedFirstToken(9), hf.ForcedBOSTokenLogitsProcessor(9)),
    (P.LogitNormalization(), hf.LogitNormalization()),
]


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=[repr(o) for o, _ in PAIRS])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_processor_equals_hf(ours, theirs, seed):
    scores, ids = random_scores(seed), prefix(seed)
    before = scores.clone()
    got = ours(ids, scores)
    expected = theirs(ids, scores.clone())
    assert torch.equal(scores, before), "a processor edited its input"
    assert torch.equal(torch.isinf(got), torch.isinf(expected))
    finite = torch.isfinite(expected)
    assert torch.allclose(got[finite], expected[finite], atol=1e-6)


def test_a_repeated_sequence_keeps_its_last_bias():
    """[[[5], 6.0], [[5], -6.0]] on a zero row: HF gives -6.0 at token 5 (its dict keeps the last bias)."""
    out = P.SequenceBias([[[5], 6.0], [[5], -6.0]])(torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, 8))
    assert out[0, 5].item() == -6.0 and out[0].abs().sum().item() == 6.0


def test_top_n_sigma_rule():
    scores = random_scores(3)
    out = P.TopNSigma(1.0)(None, scores)
    for row, kept in zip(scores, out, strict=True):
        finite = row[torch.isfinite(row)]
        threshold = finite.max() - finite.std(unbiased=False)
        assert torch.equal(torch.isfinite(kept), row >= threshold)
    # Invariant to temperature, as the paper shows.
    hot = P.TopNSigma(1.0)(None, scores / 2.0)
    assert torch.equal(torch.isfinite(hot), torch.isfinite(out))


def test_suppress_tokens():
    out = P.SuppressTokens([0, 2])(None, random_scores())
    assert torch.isinf(out[:, [0, 2]]).all() and torch.isfinite(out[:, 5]).all()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: P.TopP(1.5), "top_p=1.5 must be in (0, 1]"),
        (lambda: P.TopK(0), "top_k=0 must be a positive integer"),
        (lambda: P.Temperature(0.0), "for the argmax use method=greedy"),
        (lambda: P.MinP(-0.1), "min_p=-0.1"),
        (lambda: P.Typical(1.0), "typical_p=1.0"),
        (lambda: P.EpsilonCutoff(0.0), "epsilon=0.0"),
        (lambda: P.EtaCutoff(1.0), "eta=1.0"),
        (lambda: P.RepetitionPenalty(0.0), "repetition_penalty=0.0"),
        (lambda: P.NoRepeatNGram(0), "no_repeat_ngram_size=0"),
        (lambda: P.TopNSigma(-1.0), "top_n_sigma=-1.0"),
    ],
)
def test_bad_arguments_fail_in_init(build, message):
    with pytest.raises(ConfigError) as err:
        build()
    assert message in str(err.value)


def test_forced_first_token_only_at_the_first_step_as_hf():
    scores = random_scores(0)
    start = torch.full((6, 1), 2)
    got = P.ForcedFirstToken(9)(start, scores)
    assert torch.equal(got, hf.ForcedBOSTokenLogitsProcessor(9)(start, scores.clone()))
    assert (got[:, 9] == 0).all() and torch.isinf(got[:, :9]).all()
    assert torch.equal(P.ForcedFirstToken(9)(prefix(0), scores), scores)


def test_sequence_bias_and_bad_words_in_a_search_as_generate_applies_them():
    """Through DecodingConfig: the registry builds them first (sequence bias before the penalties, as HF)."""
    from seqlab.decoding import DecodingConfig
    from seqlab.decoding.registry import build_processors

    cfg = DecodingConfig(sequence_bias=[[[5], 1.0]], bad_words_ids=[[6, 7]], repetition_penalty=1.2)
    kinds = [type(p).__name__ for p in build_processors(cfg, cfg_ids())]
    assert kinds.index("SequenceBias") < kinds.index("RepetitionPenalty") < kinds.index("BadWords")
    assert "bias1" in cfg.label and "ban1" in cfg.label
    with pytest.raises(ConfigError, match="decoding.sequence_bias"):
        DecodingConfig(sequence_bias=[[[], 1.0]])


def cfg_ids():
    from seqlab.constants import DEFAULT_IDS

    return DEFAULT_IDS
