"""What the toolkits' decoding features cost (`seqlab bench features=true`): each against the plain search it
extends, timed in the same run on the same sources, with random weights at the bench's default shape.

An ensemble of N models should cost about N models (every step runs each model once, plus one combination);
the coverage penalty one attention computation of the last layer per step; contrastive search with K
candidates about K times greedy search's decoder rows; lexical constraints (fairseq's constrained beam search,
with and without constraints) their candidates' bookkeeping in Python, per source and step. Random weights
make the timings, not the texts, meaningful: hypotheses mostly run to the length limit, so every row decodes
the same number of tokens.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from seqlab.bench.speed import BenchConfig, decode_sources
from seqlab.decoding import DecodingConfig, generate
from seqlab.decoding.ensemble import Ensemble
from seqlab.hardware import best_of
from seqlab.model import Seq2SeqTransformer

log = logging.getLogger("seqlab.bench")


@dataclass(frozen=True)
class FeatureTiming:
    """One feature's decoding against its plain counterpart (`base`), on the same sources."""

    name: str
    base: str
    sources: int
    tokens: int
    seconds: float
    base_seconds: float

    @property
    def cost(self) -> float:
        """Time relative to the plain search: 2.0 = twice its time."""
        return self.seconds / self.base_seconds


@dataclass(frozen=True)
class Feature:
    """A decoding to time, and the plain setting it is measured against."""

    model: Any  # a model or an Ensemble
    decoding: DecodingConfig
    base: str
    constraints: list[list[list[int]]] | None = None  # per source, with decoding.constraints


def random_constraints(cfg: BenchConfig, n: int, per_source: int) -> list[list[list[int]]]:
    """`per_source` one-token constraints for each of n sources, drawn from the vocabulary's ordinary ids."""
    g = torch.Generator().manual_seed(cfg.seed + 1)
    ids = torch.randint(4, cfg.vocab, (n, per_source), generator=g)
    return [[[int(t)] for t in row] for row in ids]


def features(cfg: BenchConfig) -> dict[str, Feature]:
    """name -> the feature's decoding and what it is measured against."""
    torch.manual_seed(cfg.seed)
    models = [Seq2SeqTransformer(cfg.model_config(dropout=0.0)).eval() for _ in range(3)]
    greedy = DecodingConfig(max_length=cfg.max_new_tokens)
    beam = DecodingConfig(method="beam", num_beams=cfg.num_beams, max_length=cfg.max_new_tokens)
    coverage = DecodingConfig(method="beam", num_beams=cfg.num_beams, max_length=cfg.max_new_tokens,
                              coverage_penalty="wu", coverage_beta=0.2)
    contrastive = DecodingConfig(method="contrastive", penalty_alpha=0.6, top_k=4, max_length=cfg.max_new_tokens)
    constrained = DecodingConfig(method="beam", num_beams=cfg.num_beams, max_length=cfg.max_new_tokens,
                                 constraints="unordered")
    beam_name = f"beam{cfg.num_beams}"
    return {
        "greedy": Feature(models[0], greedy, "greedy"),
        "ensemble of 2, greedy": Feature(Ensemble(models[:2]), greedy, "greedy"),
        "ensemble of 3, greedy": Feature(Ensemble(models), greedy, "greedy"),
        "contrastive search, top 4": Feature(models[0], contrastive, "greedy"),
        beam_name: Feature(models[0], beam, beam_name),
        f"ensemble of 2, {beam_name}": Feature(Ensemble(models[:2]), beam, beam_name),
        f"coverage penalty wu, {beam_name}": Feature(models[0], coverage, beam_name),
        f"constrained search, no constraints, {beam_name}": Feature(models[0], constrained, beam_name),
        f"2 constraints (unordered), {beam_name}": Feature(models[0], constrained, beam_name,
                                                            random_constraints(cfg, cfg.decode_sources, 2)),
    }


def timed(feature: Feature, src: torch.Tensor, pad: torch.Tensor) -> tuple[int, float]:
    start = time.perf_counter()
    out = generate(feature.model, src, pad, feature.decoding, constraints=feature.constraints)
    return int(out.lengths[:, 0].sum()), time.perf_counter() - start


def feature_bench(cfg: BenchConfig, repeats: int | None = None) -> list[FeatureTiming]:
    """Every feature and its plain search, alternating, each the best of `repeats` after a warm-up."""
    src, pad = decode_sources(cfg, torch.Generator().manual_seed(cfg.seed))
    settings = features(cfg)
    runs = {name: (lambda f=f: timed(f, src, pad)) for name, f in settings.items()}
    for run in runs.values():
        run()
    best = best_of(runs, repeats or cfg.decode_repeats)
    rows = [FeatureTiming(name, f.base, src.shape[0], best[name][0], best[name][1], best[f.base][1])
            for name, f in settings.items()]
    for r in rows:
        log.info("%s: %.2fs, %.2fx %s", r.name, r.seconds, r.cost, r.base)
    return rows


def to_dict(rows: list[FeatureTiming]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]


def from_dict(values: list[dict[str, Any]]) -> list[FeatureTiming]:
    return [FeatureTiming(**v) for v in values]
