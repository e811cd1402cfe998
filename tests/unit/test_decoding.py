"""Decoding properties: beam 1 == greedy, top-k 1 == greedy, seeded and batch-invariant sampling, bad values."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from seqlab.constants import PAD_ID
from seqlab.decoding import DecodingConfig, generate, score
from seqlab.model import ConfigError, Seq2SeqTransformer
from tests.helpers import trained_toy_model


@pytest.fixture(scope="module")
def model() -> Seq2SeqTransformer:
    return trained_toy_model()


def sources(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 10, (n,), generator=g)
    ids = torch.randint(4, 40, (n, 10), generator=g)
    pad = torch.arange(10)[None, :] >= lengths[:, None]
    return ids.masked_fill(pad, PAD_ID), pad


def hyps(out, i: int, j: int = 0) -> list[int]:
    return out.sequences[i, j, : out.lengths[i, j]].tolist()


def test_beam_of_one_is_greedy(model):
    ids, pad = sources(8)
    greedy = generate(model, ids, pad, DecodingConfig(max_length=20))
    beam = generate(model, ids, pad, DecodingConfig(method="beam", num_beams=1, max_length=20))
    assert [hyps(greedy, i) for i in range(8)] == [hyps(beam, i) for i in range(8)]
    assert len({int(n) for n in greedy.lengths.view(-1)}) > 1, "fixture should give varied lengths"


def test_sampling_with_top_k_one_is_greedy(model):
    ids, pad = sources(8)
    greedy = generate(model, ids, pad, DecodingConfig(max_length=20))
    sample = generate(model, ids, pad, DecodingConfig(method="sample", top_k=1, max_length=20, seed=5))
    assert torch.equal(greedy.sequences, sample.sequences)


def test_same_seed_same_samples_other_seed_other_samples(model):
    ids, pad = sources(8)
    cfg = DecodingConfig(method="sample", n_best=3, max_length=20, seed=11)
    a, b = generate(model, ids, pad, cfg), generate(model, ids, pad, cfg)
    assert torch.equal(a.sequences, b.sequences)
    c = generate(model, ids, pad, DecodingConfig(method="sample", n_best=3, max_length=20, seed=12))
    assert not torch.equal(a.sequences, c.sequences)
    assert not torch.equal(a.sequences[:, 0], a.sequences[:, 1]), "samples of one source should differ"


def test_sample_is_batch_invariant(model):
    ids, pad = sources(32, seed=3)
    cfg = DecodingConfig(method="sample", temperature=1.2, top_p=0.95, max_length=20, seed=7)
    together = generate(model, ids, pad, cfg)
    for i in (0, 5, 31):
        real = int((~pad[i]).sum())
        alone = generate(model, ids[i : i + 1, :real], pad[i : i + 1, :real], cfg)  # no padding at all
        assert hyps(alone, 0) == hyps(together, i)


def test_token_logprobs_equal_teacher_forcing(model):
    ids, pad = sources(6)
    for cfg in (DecodingConfig(max_length=15), DecodingConfig(method="sample", n_best=1, max_length=15)):
        out = generate(model, ids, pad, cfg)
        forced = score(model, ids, pad, out.sequences[:, 0])
        within = torch.arange(out.sequences.shape[-1])[None, :] < out.lengths[:, :1]
        assert (forced * within - out.token_logprobs[:, 0]).abs().max() <= 1e-5


def test_beam_reaches_at_least_greedy_logprob_on_average(model):
    ids, pad = sources(16)
    greedy = generate(model, ids, pad, DecodingConfig(max_length=20))
    beam = generate(model, ids, pad, DecodingConfig(method="beam", num_beams=5, length_penalty=0.0, max_length=20))
    assert beam.sequence_logprobs.mean() >= greedy.sequence_logprobs.mean()


def test_lengths_respect_limits(model):
    ids, pad = sources(8)
    out = generate(model, ids, pad, DecodingConfig(min_length=4, max_length=6))
    assert out.lengths.min() >= 4 and out.lengths.max() <= 6
    out = generate(model, ids, pad, DecodingConfig(max_len_a=1.0, max_len_b=2))
    src_len = (~pad).sum(1)
    assert (out.lengths[:, 0] <= src_len + 2).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "beam", "num_beams": 0}, "num_beams=0 must be >= 1"),
        ({"method": "sample", "top_p": 1.5}, "top_p=1.5 must be in (0, 1]"),
        ({"method": "sample", "temperature": 0.0}, "for the argmax use method=greedy"),
        ({"method": "beam", "num_beams": 2, "n_best": 3}, "use n_best <= 2"),
        ({"method": "greedy", "top_k": 5}, "only applies to method=sample"),
        ({"method": "nucleus"}, "decoding.method='nucleus' is not valid"),
        ({"max_length": 0}, "max_length=0"),
    ],
)
def test_bad_values_say_what_to_use(kwargs, message):
    with pytest.raises(ConfigError) as err:
        DecodingConfig(**kwargs)
    assert message in str(err.value)


EARLY = dict(method="beam", max_length=20, early_stopping=True)  # examples finish (and leave) at different steps


@pytest.mark.parametrize("cfg", [
    DecodingConfig(num_beams=5, n_best=5, **EARLY),
    DecodingConfig(num_beams=4, num_beam_groups=2, diversity_penalty=0.5, n_best=4, **EARLY),
], ids=["beam", "diverse"])
def test_beam_cache_moves_keep_every_hypothesis_exact(model, cfg):
    """Beams copy only the cache positions they do not share with their parent, and finished examples'
    slots go to the last ones: every hypothesis's log-probs still equal teacher forcing, and each example
    decodes as it does alone."""
    ids, pad = sources(12, seed=4)
    together = generate(model, ids, pad, cfg)
    assert len({int(n) for n in together.lengths[:, 0]}) > 2, "examples should finish at different steps"
    for j in range(cfg.n_best):
        forced = score(model, ids, pad, together.sequences[:, j])
        within = torch.arange(together.sequences.shape[-1])[None, :] < together.lengths[:, j : j + 1]
        assert (forced * within - together.token_logprobs[:, j]).abs().max() <= 1e-5
    for i in (0, 4, 11):
        real = int((~pad[i]).sum())
        alone = generate(model, ids[i : i + 1, :real], pad[i : i + 1, :real], cfg)
        assert [hyps(alone, 0, j) for j in range(cfg.n_best)] == [hyps(together, i, j) for j in range(cfg.n_best)]


def test_settings_that_differ_only_in_a_penalty_or_constraint_have_different_labels():
    """A comparison names its systems by label: beam 5 with and without no-repeat blocking must differ."""
    beam = DecodingConfig(method="beam", num_beams=5)
    variants = [beam, replace(beam, no_repeat_ngram_size=3), replace(beam, no_repeat_ngram_size=4),
                replace(beam, repetition_penalty=1.2), replace(beam, min_length=5),
                DecodingConfig(no_repeat_ngram_size=3),
                DecodingConfig(method="sample", top_p=0.9, presence_penalty=0.5)]
    labels = [v.label for v in variants]
    assert len(set(labels)) == len(labels)
    assert labels[:2] == ["beam5_lp1", "beam5_lp1_norepeat3"] and labels[5] == "greedy_norepeat3"
