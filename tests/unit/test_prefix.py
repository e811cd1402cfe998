"""Forced target prefixes (fairseq's --prefix-size, CTranslate2's target_prefix): every output of a source starts
with its prefix in every search, each forced token keeps its own log-prob in the scores and the reported
log-probs, and what follows equals an independent continuation of the prefix."""

from __future__ import annotations

import pytest
import torch

from seqlab.config import ConfigError
from seqlab.constants import BOS_ID, EOS_ID, PAD_ID
from seqlab.decoding import DecodingConfig, generate, score
from seqlab.model import Seq2SeqTransformer
from tests.helpers import trained_toy_model
from tests.unit.test_decoding import sources

PREFIXES = [[7, 8], [], [9], [10, 11, 12], [7], [], [13, 14], [15]]


@pytest.fixture(scope="module")
def model() -> Seq2SeqTransformer:
    return trained_toy_model()


def outputs(out, i: int) -> list[list[int]]:
    return [out.sequences[i, j, : out.lengths[i, j]].tolist() for j in range(out.sequences.shape[1])]


def teacher_forced(model, ids, pad, i, tokens) -> torch.Tensor:
    keep = ~pad[i]
    return score(model, ids[i : i + 1, keep], pad[i : i + 1, keep], torch.tensor([tokens]))[0]


@pytest.mark.parametrize("cfg", [
    DecodingConfig(max_length=14),
    DecodingConfig(method="beam", num_beams=4, n_best=3, max_length=14),
    DecodingConfig(method="beam", num_beams=4, num_beam_groups=2, diversity_penalty=0.5, n_best=2, max_length=14),
    DecodingConfig(method="sample", n_best=3, max_length=14, seed=2),
    DecodingConfig(method="contrastive", penalty_alpha=0.5, top_k=3, max_length=14),
], ids=lambda c: c.label)
def test_every_output_starts_with_its_prefix_and_counts_its_log_probs(model, cfg):
    ids, pad = sources(8, seed=3)
    out = generate(model, ids, pad, cfg, target_prefix=PREFIXES)
    for i, prefix in enumerate(PREFIXES):
        for j, hyp in enumerate(outputs(out, i)):
            assert hyp[: len(prefix)] == prefix, (i, j)
            torch.testing.assert_close(out.token_logprobs[i, j, : len(hyp)], teacher_forced(model, ids, pad, i, hyp),
                                       atol=1e-4, rtol=0)
        if cfg.method == "beam":  # ranked by the whole hypothesis's score, prefix included (fairseq's)
            n = out.lengths[i].float()
            torch.testing.assert_close(out.scores[i], out.token_logprobs[i].sum(-1) / n, atol=1e-4, rtol=0)
        elif cfg.method != "contrastive":
            torch.testing.assert_close(out.scores[i], out.token_logprobs[i].sum(-1), atol=1e-4, rtol=0)


def test_greedy_continues_the_prefix_as_a_cache_free_greedy_would(model):
    ids, pad = sources(8, seed=3)
    out = generate(model, ids, pad, DecodingConfig(max_length=14), target_prefix=PREFIXES)
    for i, prefix in enumerate(PREFIXES):
        keep = ~pad[i]
        tokens = list(prefix)
        with torch.no_grad():
            while len(tokens) < 14 and (not tokens or tokens[-1] != EOS_ID):
                logits = model(ids[i : i + 1, keep], pad[i : i + 1, keep], torch.tensor([[BOS_ID, *tokens]]))[0, -1]
                logits[[PAD_ID, BOS_ID]] = float("-inf")  # seqlab's rule: pad and the decoder start never emitted
                tokens.append(int(logits.argmax()))
        assert outputs(out, i)[0] == tokens


def test_a_padded_row_equals_its_source_alone(model):
    ids, pad = sources(8, seed=3)
    cfg = DecodingConfig(method="beam", num_beams=3, n_best=3, max_length=14)
    out = generate(model, ids, pad, cfg, target_prefix=PREFIXES)
    for i in (0, 3, 5):
        keep = ~pad[i]
        alone = generate(model, ids[i : i + 1, keep], pad[i : i + 1, keep], cfg, target_prefix=[PREFIXES[i]])
        assert outputs(alone, 0) == outputs(out, i)


def test_a_prefix_without_room_is_refused_naming_the_source(model):
    ids, pad = sources(2, seed=3)
    with pytest.raises(ConfigError, match="target prefix of source 1 has 5 tokens, but its length limit is 5"):
        generate(model, ids, pad, DecodingConfig(max_length=5), target_prefix=[[7], [7, 8, 9, 10, 11]])
