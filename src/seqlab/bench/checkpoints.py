"""Decoding speed of trained checkpoints on their test sentences (`seqlab bench checkpoints=[A,B,...]`): each
decodes the same sources greedily and with beam 5, as an evaluation batches them (`decode_texts`, fp32,
seqlab's engine), the runs alternating and each the best of `decode_repeats`; tokens/s and the time against
the first checkpoint. What a study question that trades quality against speed (a deep encoder with a shallow
decoder) reports beside its BLEU: the outputs are the trained models' own, so their lengths are real.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from seqlab.bench.speed import BenchConfig
from seqlab.checkpoint import load_for_inference, resolve
from seqlab.config import ConfigError
from seqlab.data import DataConfig
from seqlab.data.corpora import load_split
from seqlab.decoding import DecodingConfig
from seqlab.hardware import best_of
from seqlab.inference.evaluation import decode_texts

log = logging.getLogger("seqlab.bench")
MAX_TOKENS = 8000  # source tokens x rows per batch: the evaluation's default


@dataclass(frozen=True)
class CheckpointTiming:
    """One checkpoint and decoding on the shared test sentences."""

    checkpoint: str
    run: str  # the training run's name
    decoding: str
    sources: int
    tokens: int
    seconds: float
    first_seconds: float  # the first checkpoint's, same decoding

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    @property
    def speedup(self) -> float:
        """> 1: decodes the test sentences faster than the first checkpoint."""
        return self.first_seconds / self.seconds


def checkpoint_bench(cfg: BenchConfig, checkpoints: list[str]) -> list[CheckpointTiming]:
    """Every checkpoint, greedy and beam `cfg.num_beams`, on the first checkpoint's test split (its first
    `cfg.decode_sources` sentences; 0: all of them)."""
    if not checkpoints:
        raise ConfigError("checkpoints=[]: give the checkpoints to time, e.g. checkpoints=[A,B]")
    loaded = []
    for given in checkpoints:
        model, tokenizer, info = load_for_inference(resolve(given), device="cpu")
        loaded.append((given, model, tokenizer, info))
    corpus = loaded[0][3].data_config
    if not corpus:
        raise ConfigError(f"checkpoints: {checkpoints[0]} records no corpus; time checkpoints of seqlab trainings")
    other = next((c for c, _, _, i in loaded[1:] if (i.data_config or {}).get("corpus") != corpus["corpus"]), None)
    if other is not None:
        raise ConfigError(f"checkpoints: {other} was trained on another corpus than {checkpoints[0]}; time "
                          "checkpoints of one corpus, on its test sentences")
    sources = [e.source for e in load_split(DataConfig.from_dict(corpus).corpus, "test")]
    sources = sources[: cfg.decode_sources] if cfg.decode_sources else sources
    settings = {"greedy": DecodingConfig(), f"beam{cfg.num_beams}": DecodingConfig(method="beam",
                                                                                   num_beams=cfg.num_beams)}
    rows = []
    for name, decoding in settings.items():
        runs = {given: (lambda m=model, t=tokenizer, d=decoding: timed(m, t, sources, d))
                for given, model, tokenizer, _ in loaded}
        best = best_of(runs, cfg.decode_repeats)
        first = best[checkpoints[0]][1]
        for given, _, _, info in loaded:
            tokens, seconds = best[given]
            rows.append(CheckpointTiming(given, str(info.run_config.get("run_name")), name, len(sources), tokens,
                                         seconds, first))
            log.info("%s %s: %.1fs, %.0f tokens/s", rows[-1].run, name, seconds, rows[-1].tokens_per_s)
    return rows


def timed(model: Any, tokenizer: Any, sources: list[str], decoding: DecodingConfig) -> tuple[int, float]:
    decoded = decode_texts(model, tokenizer, sources, decoding, MAX_TOKENS)
    return decoded.generated_tokens, decoded.seconds


def to_dict(rows: list[CheckpointTiming]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]


def from_dict(values: list[dict[str, Any]]) -> list[CheckpointTiming]:
    return [CheckpointTiming(**v) for v in values]
