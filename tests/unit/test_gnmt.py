"""GNMT scoring in beam search: OpenNMT-py's length penalty `wu` and coverage penalties `wu` and `summary`.

The formulas are OpenNMT-py's (onmt/translate/penalties.py), written out here as it writes them; every
hypothesis beam search returns must carry the score they give, with its coverage recomputed independently
by teacher forcing the hypothesis alone with the model's attention recorded."""

from __future__ import annotations

import math

import pytest
import torch

from seqlab.constants import BOS_ID
from seqlab.decoding import DecodingConfig, generate
from seqlab.decoding.coverage import coverage_penalty
from seqlab.decoding.search import LengthPenalty
from seqlab.inference.inspection import record_attention
from seqlab.model import ConfigError, Seq2SeqTransformer
from tests.helpers import trained_toy_model
from tests.unit.test_decoding import hyps, sources


@pytest.fixture(scope="module")
def model() -> Seq2SeqTransformer:
    return trained_toy_model()


# OpenNMT-py's PenaltyBuilder, as it writes them
def onmt_coverage_wu(cov: torch.Tensor, beta: float) -> torch.Tensor:
    penalty = -torch.min(cov, cov.clone().fill_(1.0)).log().sum(-1)
    return beta * penalty


def onmt_coverage_summary(cov: torch.Tensor, beta: float) -> torch.Tensor:
    penalty = torch.max(cov, cov.clone().fill_(1.0)).sum(-1)
    penalty -= cov.size(-1)
    return beta * penalty


def onmt_length_wu(cur_len: int, alpha: float) -> float:
    return ((5 + cur_len) / 6.0) ** alpha


def test_penalties_equal_opennmt_formulas():
    cov = torch.tensor([[0.5, 1.5, 1.0], [0.1, 0.2, 3.0]])
    assert coverage_penalty(cov, "wu", 0.2).tolist() == pytest.approx([0.2 * -math.log(0.5),
                                                                        0.2 * -(math.log(0.1) + math.log(0.2))])
    assert coverage_penalty(cov, "summary", 0.2).tolist() == pytest.approx([0.1, 0.4])
    rand = torch.rand(4, 5, 7, generator=torch.Generator().manual_seed(0)) * 2
    for beta in (0.2, 1.0):
        torch.testing.assert_close(coverage_penalty(rand, "wu", beta), onmt_coverage_wu(rand, beta))
        torch.testing.assert_close(coverage_penalty(rand, "summary", beta), onmt_coverage_summary(rand, beta))
    # OpenNMT-py scores a hypothesis that ends at its `step` (the decoder start counted in its alive sequence)
    # with length_penalty(step + 1): n generated tokens, EOS included, are |Y| = n + 1
    for n, alpha in ((1, 0.6), (7, 0.6), (12, 1.0), (3, 0.0)):
        assert float(LengthPenalty(alpha, "wu")(torch.tensor(-3.0), float(n))) == pytest.approx(
            -3.0 / onmt_length_wu(n + 1, alpha))
        assert float(LengthPenalty(alpha)(torch.tensor(-3.0), float(n))) == pytest.approx(-3.0 / n**alpha)


def coverage_by_teacher_forcing(model: Seq2SeqTransformer, src: list[int], hyp: list[int]) -> torch.Tensor:
    """(S,) the last decoder layer's cross-attention, averaged over heads, summed over the hypothesis's steps:
    the hypothesis alone, its source unpadded."""
    src_ids = torch.tensor([src])
    tgt_in = torch.tensor([[BOS_ID, *hyp[:-1]]])
    with torch.no_grad(), record_attention(model) as weights:
        model(src_ids, torch.zeros_like(src_ids, dtype=torch.bool), tgt_in)
    return weights["cross"][-1][0].mean(0).sum(0)  # (H, T, S) -> (S,)


@pytest.mark.parametrize("rule,beta,alpha,length_rule", [("wu", 0.4, 0.6, "wu"), ("summary", 0.5, 1.0, "power"),
                                                         ("wu", 2.0, 1.0, "power")])
def test_every_hypothesis_carries_its_gnmt_score(model, rule, beta, alpha, length_rule):
    ids, pad = sources(12, seed=4)
    cfg = DecodingConfig(method="beam", num_beams=4, n_best=4, max_length=15, length_penalty=alpha,
                         length_rule=length_rule, coverage_penalty=rule, coverage_beta=beta)
    out = generate(model, ids, pad, cfg)
    lp = LengthPenalty(alpha, length_rule)
    for i in range(ids.shape[0]):
        src = ids[i][~pad[i]].tolist()
        assert out.scores[i].tolist() == sorted(out.scores[i].tolist(), reverse=True)
        for j in range(4):
            hyp, n = hyps(out, i, j), int(out.lengths[i, j])
            coverage = coverage_by_teacher_forcing(model, src, hyp)
            expected = lp(out.token_logprobs[i, j, :n].sum(), float(n)) - coverage_penalty(coverage, rule, beta)
            assert float(out.scores[i, j]) == pytest.approx(float(expected), abs=1e-4)


def test_coverage_changes_outputs_and_each_row_equals_its_source_alone(model):
    ids, pad = sources(16, seed=7)
    plain = DecodingConfig(method="beam", num_beams=4, max_length=15, early_stopping=True)
    covered = DecodingConfig(method="beam", num_beams=4, max_length=15, early_stopping=True,
                             coverage_penalty="wu", coverage_beta=3.0)
    a, b = generate(model, ids, pad, plain), generate(model, ids, pad, covered)
    assert any(hyps(a, i) != hyps(b, i) for i in range(16)), "a strong coverage penalty should change some output"
    for i in range(16):
        keep = ~pad[i]
        alone = generate(model, ids[i : i + 1, keep], pad[i : i + 1, keep], covered)
        assert hyps(alone, 0) == hyps(b, i)
        assert float(alone.scores[0, 0]) == pytest.approx(float(b.scores[i, 0]), abs=1e-5)


def test_wu_length_rule_with_alpha_zero_is_plain_beam(model):
    ids, pad = sources(8, seed=2)
    base = dict(method="beam", num_beams=3, max_length=12, length_penalty=0.0)
    a = generate(model, ids, pad, DecodingConfig(**base))
    b = generate(model, ids, pad, DecodingConfig(**base, length_rule="wu"))
    assert torch.equal(a.sequences, b.sequences) and torch.allclose(a.scores, b.scores)


@pytest.mark.parametrize("kwargs,message", [
    (dict(coverage_penalty="wu", coverage_beta=0.2), "coverage_penalty=wu rescores finished beams"),
    (dict(method="beam", num_beams=2, coverage_penalty="wu"), "coverage_beta=0.0 must be > 0"),
    (dict(method="beam", num_beams=2, coverage_beta=0.2), "coverage_beta=0.2 without decoding.coverage_penalty"),
    (dict(method="beam", num_beams=2, coverage_penalty="gnmt", coverage_beta=0.2), "coverage_penalty='gnmt'"),
    (dict(length_rule="wu"), "length_rule=wu scores finished beams"),
    (dict(method="beam", num_beams=4, num_beam_groups=2, diversity_penalty=0.5, coverage_penalty="summary",
          coverage_beta=0.2), "num_beam_groups=2"),
])
def test_bad_gnmt_settings_name_the_key(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        DecodingConfig(**kwargs)


def test_labels_and_engines():
    from seqlab.engines.ct2 import check_decodable
    from seqlab.interop.generation import generation_config
    from seqlab.model import ModelConfig

    wu = DecodingConfig(method="beam", num_beams=5, length_penalty=0.6, length_rule="wu")
    cov = DecodingConfig(method="beam", num_beams=5, coverage_penalty="summary", coverage_beta=0.2)
    assert (wu.label, cov.label) == ("beam5_lpwu0.6", "beam5_lp1_covsummary0.2")
    for cfg, key in ((wu, "length_rule='wu'"), (cov, "coverage_penalty='summary'")):
        with pytest.raises(ConfigError, match=key):
            check_decodable(cfg)
        with pytest.raises(ConfigError, match="has no GNMT"):
            generation_config(cfg, ModelConfig(src_vocab_size=40))
