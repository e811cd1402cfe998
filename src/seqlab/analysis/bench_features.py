"""What the toolkits' decoding features cost (`seqlab bench features=true`): each against the plain search it
extends, timed in the same run on the same sources, with random weights at the bench's default shape.

An ensemble of N models should cost about N models (every step runs each model once, plus one combination);
the coverage penalty one attention computation of the last layer per step; contrastive search with K
candidates about K times greedy search's decoder rows. Random weights make the timings, not the texts,
meaningful: hypotheses mostly run to the length limit, so every row decodes the same number of tokens.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from seqlab.analysis.speed import BenchConfig, decode_sources
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


def features(cfg: BenchConfig) -> dict[str, tuple[Any, DecodingConfig, str]]:
    """name -> (the models, the decoding, the plain setting it is measured against)."""
    torch.manual_seed(cfg.seed)
    models = [Seq2SeqTransformer(cfg.model_config(dropout=0.0)).eval() for _ in range(3)]
    greedy = DecodingConfig(max_length=cfg.max_new_tokens)
    beam = DecodingConfig(method="beam", num_beams=cfg.num_beams, max_length=cfg.max_new_tokens)
    coverage = DecodingConfig(method="beam", num_beams=cfg.num_beams, max_length=cfg.max_new_tokens,
                              coverage_penalty="wu", coverage_beta=0.2)
    contrastive = DecodingConfig(method="contrastive", penalty_alpha=0.6, top_k=4, max_length=cfg.max_new_tokens)
    beam_name = f"beam{cfg.num_beams}"
    return {
        "greedy": (models[0], greedy, "greedy"),
        "ensemble of 2, greedy": (Ensemble(models[:2]), greedy, "greedy"),
        "ensemble of 3, greedy": (Ensemble(models), greedy, "greedy"),
        "contrastive search, top 4": (models[0], contrastive, "greedy"),
        beam_name: (models[0], beam, beam_name),
        f"ensemble of 2, {beam_name}": (Ensemble(models[:2]), beam, beam_name),
        f"coverage penalty wu, {beam_name}": (models[0], coverage, beam_name),
    }


def timed(model: Any, src: torch.Tensor, pad: torch.Tensor, cfg: DecodingConfig) -> tuple[int, float]:
    start = time.perf_counter()
    out = generate(model, src, pad, cfg)
    return int(out.lengths[:, 0].sum()), time.perf_counter() - start


def feature_bench(cfg: BenchConfig, repeats: int | None = None) -> list[FeatureTiming]:
    """Every feature and its plain search, alternating, each the best of `repeats` after a warm-up."""
    src, pad = decode_sources(cfg, torch.Generator().manual_seed(cfg.seed))
    settings = features(cfg)
    runs = {name: (lambda m=m, d=d: timed(m, src, pad, d)) for name, (m, d, _) in settings.items()}
    for run in runs.values():
        run()
    best = best_of(runs, repeats or cfg.decode_repeats)
    rows = [FeatureTiming(name, base, src.shape[0], best[name][0], best[name][1], best[base][1])
            for name, (_, _, base) in settings.items()]
    for r in rows:
        log.info("%s: %.2fs, %.2fx %s", r.name, r.seconds, r.cost, r.base)
    return rows


def to_dict(rows: list[FeatureTiming]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]


def from_dict(values: list[dict[str, Any]]) -> list[FeatureTiming]:
    return [FeatureTiming(**v) for v in values]
