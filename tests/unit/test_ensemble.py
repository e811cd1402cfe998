"""Ensembles against independent computations: the combination rules by formula, an ensemble of one model
equals the model, and an ensemble of two equals searches driven by a step function written here (full
forward passes of both models on every prefix, no cache, combined by the formula) in greedy, beam and
diverse beam search, sampling and MBR alike."""

from __future__ import annotations

import pytest
import torch

from seqlab.config import ConfigError
from seqlab.constants import SpecialIds
from seqlab.decoding import DecodingConfig, generate
from seqlab.decoding.beam import beam_search
from seqlab.decoding.ensemble import Ensemble, check_members, combine
from seqlab.decoding.labels import run_label
from seqlab.decoding.processors import SuppressTokens
from seqlab.decoding.search import LengthPenalty, sample_or_greedy
from seqlab.model import Seq2SeqTransformer
from tests.helpers import trained_toy_model
from tests.unit.test_decoding import hyps, sources


@pytest.fixture(scope="module")
def pair() -> tuple[Seq2SeqTransformer, Seq2SeqTransformer]:
    return trained_toy_model(seed=0), trained_toy_model(steps=40, seed=1)


def test_combination_rules_by_formula():
    g = torch.Generator().manual_seed(0)
    a, b = (torch.log_softmax(torch.randn(3, 7, generator=g), -1) for _ in range(2))
    mixture = torch.log((a.exp() + b.exp()) / 2)  # fairseq: log of the mean probability
    torch.testing.assert_close(combine([a, b], "mean_prob"), mixture)
    torch.testing.assert_close(combine([a, b], "mean_logprob"), (a + b) / 2)  # OpenNMT-py: the mean log-prob
    torch.testing.assert_close(combine([a], "mean_prob"), a)
    assert combine([a, b], "mean_prob").exp().sum(-1).sub(1).abs().max() < 1e-5  # a distribution itself


SETTINGS = [DecodingConfig(max_length=15),
            DecodingConfig(method="beam", num_beams=4, n_best=2, max_length=15),
            DecodingConfig(method="beam", num_beams=4, num_beam_groups=2, diversity_penalty=0.5, max_length=12),
            DecodingConfig(method="sample", n_best=3, top_p=0.9, max_length=12, seed=3)]


@pytest.mark.parametrize("cfg", SETTINGS, ids=lambda c: c.label)
def test_an_ensemble_of_one_is_the_model(pair, cfg):
    model = pair[0]
    ids, pad = sources(10, seed=5)
    alone, ensemble = generate(model, ids, pad, cfg), generate(Ensemble([model]), ids, pad, cfg)
    assert torch.equal(alone.sequences, ensemble.sequences)
    torch.testing.assert_close(alone.scores, ensemble.scores, atol=1e-4, rtol=0)


class StepCache:
    """Stands in for a decoder cache with no keys or values: each row's source and tokens so far (the decoder
    start, then each step's input token), moved as a search moves its rows."""

    def __init__(self, src_ids: torch.Tensor, pad: torch.Tensor) -> None:
        self.src, self.pad = src_ids, pad
        self.prefix = torch.zeros((src_ids.shape[0], 0), dtype=torch.long)

    def expand_(self, group: int) -> None:
        self.src, self.pad = self.src.repeat_interleave(group, 0), self.pad.repeat_interleave(group, 0)
        self.prefix = self.prefix.repeat_interleave(group, 0)

    def compact_(self, index: torch.Tensor, kept: torch.Tensor | None = None, same_sources: bool = False) -> None:
        self.src, self.pad, self.prefix = self.src[index], self.pad[index], self.prefix[index]


def cache_free_step(models, rule):
    """A StepFn: full forward passes of every model on each row's whole prefix, combined by the formula."""
    def step(last: torch.Tensor, cache: StepCache):
        cache.prefix = torch.cat([cache.prefix, last[:, None]], 1)  # BOS first, then the chosen tokens
        with torch.no_grad():
            lps = [torch.log_softmax(m(cache.src, cache.pad, cache.prefix)[:, -1].double(), -1) for m in models]
        mixture = torch.log(sum(lp.exp() for lp in lps) / len(lps))  # fairseq: log of the mean probability
        geometric = sum(lps) / len(lps)  # OpenNMT-py: the mean log-prob
        return (mixture if rule == "mean_prob" else geometric).float(), cache
    return step


@pytest.mark.parametrize("rule", ["mean_prob", "mean_logprob"])
def test_two_models_greedy_and_beam_equal_a_cache_free_ensemble(pair, rule):
    ids, pad = sources(12, seed=9)
    ensemble = Ensemble(list(pair), rule)
    models = list(pair)
    ids_cfg = models[0].cfg
    special = SpecialIds(ids_cfg.pad_id, ids_cfg.bos_id, ids_cfg.eos_id)
    banned = [SuppressTokens([ids_cfg.pad_id, ids_cfg.bos_id])]  # seqlab's rule for its own models
    limit = torch.full((12,), 14)

    greedy = generate(ensemble, ids, pad, DecodingConfig(max_length=14))
    ref = sample_or_greedy(cache_free_step(models, rule), StepCache(ids, pad), ids=special, max_new=limit,
                           processors=banned, keys=None, seed=0)
    for i in range(12):
        n = int(ref.lengths[i, 0])
        assert hyps(greedy, i) == ref.sequences[i, 0, :n].tolist()
        torch.testing.assert_close(greedy.token_logprobs[i, 0, :n], ref.token_logprobs[i, 0, :n], atol=1e-4, rtol=0)

    cfg = DecodingConfig(method="beam", num_beams=4, n_best=4, max_length=14, early_stopping=True, force_eos="fairseq")
    beam = generate(ensemble, ids, pad, cfg)
    ref = beam_search(cache_free_step(models, rule), StepCache(ids, pad), ids=special, max_new=limit, num_beams=4,
                      length_penalty=LengthPenalty(1.0), early_stopping=True, processors=banned, force_eos="fairseq")
    for i in range(12):
        for j in range(4):
            n = int(ref.lengths[i, j])
            assert beam.sequences[i, j, :n].tolist() == ref.sequences[i, j, :n].tolist(), (i, j)
    torch.testing.assert_close(beam.scores, ref.scores, atol=1e-4, rtol=0)
    single = [generate(m, ids, pad, DecodingConfig(max_length=14)) for m in models]
    assert any(hyps(greedy, i) != hyps(s, i) for s in single for i in range(12)), "the ensemble should matter"


def test_sampling_and_mbr_run_on_an_ensemble_batch_invariantly(pair):
    ids, pad = sources(8, seed=2)
    ensemble = Ensemble(list(pair))
    cfg = DecodingConfig(method="sample", n_best=2, max_length=10, seed=4, mbr={"utility": "chrf", "candidates": 2})
    both = generate(ensemble, ids, pad, cfg)
    for i in (0, 5):
        keep = ~pad[i]
        alone = generate(ensemble, ids[i : i + 1, keep], pad[i : i + 1, keep], cfg)
        assert alone.sequences[0, :, : alone.sequences.shape[-1]].tolist() == \
            both.sequences[i, :, : alone.sequences.shape[-1]].tolist()


def test_refusals_and_labels():
    beam = DecodingConfig(method="beam", num_beams=4)
    check_members(beam, "seqlab", "eval")
    with pytest.raises(ConfigError, match="engine=ctranslate2 decodes one model"):
        check_members(beam, "ctranslate2", "eval")
    with pytest.raises(ConfigError, match="eval.ensemble: engine=seqlab_graphs decodes one model"):
        check_members(beam, "seqlab_graphs", "eval")
    with pytest.raises(ConfigError, match="coverage_penalty=wu reads one model's attention"):
        check_members(DecodingConfig(method="beam", num_beams=4, coverage_penalty="wu", coverage_beta=0.2),
                      "seqlab", "eval")
    with pytest.raises(ConfigError, match="contrastive compares one model's hidden states"):
        check_members(DecodingConfig(method="contrastive", penalty_alpha=0.5, top_k=3), "seqlab", "translate")
    with pytest.raises(ConfigError, match="ensemble_rule='vote'"):
        Ensemble([trained_toy_model(steps=1)], "vote")  # type: ignore[arg-type]
    assert tuple(run_label("", "fp32", "seqlab", extra, rule)
                 for extra, rule in ((0, "mean_prob"), (2, "mean_prob"), (1, "mean_logprob"))) == \
        ("", "_ens3", "_ens2_meanlp")
