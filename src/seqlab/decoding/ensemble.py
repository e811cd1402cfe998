"""Ensembles: several checkpoints that share a tokenizer decode as one model, each with its own encoder output
and cache, their next-token distributions combined at every step.

Two combination rules, named as the toolkits name them:

- `mean_prob` (fairseq's EnsembleModel, `--path a.pt:b.pt`): log of the mean probability,
  logsumexp_i(log p_i) - log N: the mixture of the models, a distribution itself;
- `mean_logprob` (OpenNMT-py's EnsembleGenerator, `-model a.pt b.pt`): the mean log-probability,
  mean_i(log p_i): the models' geometric mean, unnormalized. The searches read any model's output as
  logits and take a log-softmax (which leaves `mean_prob` as it is), so here it is the normalized
  geometric mean (a product of experts): greedy search and sampling choose as OpenNMT-py does, beam search
  scores with the normalized values.

`Ensemble` is used wherever a model is (generate, score, the evaluation): every search, sampler and MBR
runs on it unchanged. What needs one model's internals is refused before decoding: the coverage penalty
(one model's attention) and contrastive search (one model's hidden states).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

import torch
from torch import Tensor, nn

from seqlab.config import ConfigError, check_choice
from seqlab.decoding.config import DecodingConfig
from seqlab.decoding.methods import method_of
from seqlab.model import DecoderCache, Model, ModelConfig, RowLayout

Combination = Literal["mean_prob", "mean_logprob"]


def combine(logprobs: Sequence[Tensor], rule: Combination, owned: bool = False) -> Tensor:
    """(..., V) log-probabilities of each model -> the ensemble's (..., V) log-scores, in fp32.

    Accumulated into one tensor, one pass per further model, rather than stacked: the vocabulary-wide passes
    are most of what an ensemble adds to its models. owned: the inputs are the caller's to overwrite (the
    first one becomes the result); else they are left as they are."""
    out = logprobs[0].float() if owned else logprobs[0].float().clone()
    for lp in logprobs[1:]:
        if rule == "mean_prob":
            torch.logaddexp(out, lp.float(), out=out)
        else:
            out.add_(lp.float())
    return out.sub_(math.log(len(logprobs))) if rule == "mean_prob" else out.div_(len(logprobs))


class EnsembleCache:
    """One DecoderCache per model, moved together: every operation a search applies goes to each."""

    def __init__(self, caches: list[DecoderCache]) -> None:
        self.caches = caches

    def compact_(self, index: Tensor, kept: Tensor | None = None, same_sources: bool = False) -> None:
        for cache in self.caches:
            cache.compact_(index, kept, same_sources)

    def expand_(self, group: int) -> None:
        for cache in self.caches:
            cache.expand_(group)

    def collapse_(self, index: Tensor) -> None:
        for cache in self.caches:
            cache.collapse_(index)

    def ungroup(self) -> EnsembleCache:
        return EnsembleCache([cache.ungroup() for cache in self.caches])


class Ensemble(nn.Module):
    """Models decoded as one (see the module docstring). `cfg` is the first model's, with the shortest
    position limit of all, so a length every member can take."""

    def __init__(self, models: Sequence[Model], rule: Combination = "mean_prob") -> None:
        super().__init__()
        if not models:
            raise ConfigError("an ensemble needs at least one model")
        check_choice("ensemble", "ensemble_rule", rule, Combination)
        self.members = nn.ModuleList(models)
        self.rule = rule
        self.cfg: ModelConfig = replace(models[0].cfg, max_positions=min(m.cfg.max_positions for m in models))

    @property
    def layout(self) -> RowLayout:
        return self.cfg.layout

    def attention_modules(self) -> list[tuple[nn.Module, str]]:
        """None: each member attends in its own way, and no one map is the ensemble's."""
        return []

    def step_at_blocker(self) -> str | None:
        return "an ensemble decodes with each model's own step"

    def encode(self, src_ids: Tensor, src_pad_mask: Tensor) -> list[Tensor]:
        """Each model's memory (B, S, d_i)."""
        return [m.encode(src_ids, src_pad_mask) for m in self.members]

    def start_cache(self, memory: list[Tensor], src_pad_mask: Tensor, group: int = 1, capacity: int = 64,
                    src_ids: Tensor | None = None) -> EnsembleCache:
        return EnsembleCache([m.start_cache(mem, src_pad_mask, group=group, capacity=capacity, src_ids=src_ids)
                              for m, mem in zip(self.members, memory, strict=True)])

    def decode(self, tgt_ids: Tensor, memory: list[Tensor] | None, src_pad_mask: Tensor | None,
               cache: EnsembleCache | None = None, src_ids: Tensor | None = None,
               states: list[Tensor] | None = None) -> tuple[Tensor, EnsembleCache | None]:
        """(B, T, V) the combined log-scores; with a cache, each model's is extended in place."""
        if states is not None:
            raise ConfigError("an ensemble has no single decoder state (contrastive search needs one model)")
        outs = []
        for i, m in enumerate(self.members):
            logits, _ = m.decode(tgt_ids, None if memory is None else memory[i], src_pad_mask,
                                 None if cache is None else cache.caches[i], src_ids)
            outs.append(torch.log_softmax(logits.float(), dim=-1))
        return combine(outs, self.rule, owned=True), cache

    def forward(self, src_ids: Tensor, src_pad_mask: Tensor, tgt_in_ids: Tensor) -> Tensor:
        """(B, T, V) combined log-scores by teacher forcing (for `score`)."""
        return combine([torch.log_softmax(m(src_ids, src_pad_mask, tgt_in_ids).float(), dim=-1)
                        for m in self.members], self.rule, owned=True)


def check_members(decoding: DecodingConfig, engine: str, owner: str) -> None:
    """Fail, naming the key, on what an ensemble cannot decode with."""
    if engine in ("ctranslate2", "seqlab_graphs", "seqlab_compiled"):  # CTranslate2's model, or one model's step
        raise ConfigError(f"{owner}.ensemble: engine={engine} decodes one model; use engine=seqlab (or auto)")
    if decoding.coverage_penalty is not None:
        raise ConfigError(f"decoding.coverage_penalty={decoding.coverage_penalty} reads one model's attention; an "
                          f"ensemble has one per model: set it to null or decode without {owner}.ensemble")
    if method_of(decoding).one_model:
        raise ConfigError(f"decoding.method={decoding.method} compares one model's hidden states; decode without "
                          f"{owner}.ensemble")
