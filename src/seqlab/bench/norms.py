"""LayerNorm against RMSNorm at the bench's shape (`seqlab bench norms=true`; the default shape is the study's
mt_bible_small model, d 256, 3+3 layers, an 8k vocabulary): the "faster" half of Zhang & Sennrich's claim,
which the study's BLEU half answered (docs/experiments/arch_study_trained.md).

The two models differ in the norm alone (same seed, same weights elsewhere). Each is timed in one run, the two
alternating within each repeat: a training step in the precision training picks on this machine by default
(`trainer.precision=auto`), and greedy and beam-5 decoding in fp32 (evaluation's precision) of the untrained
models with EOS banned until the length limit (`seqlab_decode`'s `min_new`), so that both generate the same
number of tokens (an untrained model's outputs end wherever its random weights put EOS, which differs with the
norm).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

import torch

from seqlab.bench.speed import (
    BenchConfig,
    decode_sources,
    random_batch,
    seqlab_decode,
    seqlab_train_step,
    train_throughput,
)
from seqlab.config import resolve_device
from seqlab.hardware import auto_precision, best_of
from seqlab.model import Seq2SeqTransformer

log = logging.getLogger("seqlab.bench")
NORMS = ("layernorm", "rmsnorm")
BEAMS = {"greedy": 1, "beam5": 5}


@dataclass(frozen=True)
class NormTiming:
    """One norm's speeds and their ratio to LayerNorm's in the same run (> 1: faster)."""

    norm: str
    train_tokens_per_s: float
    train_x_layernorm: float
    greedy_tokens_per_s: float
    greedy_x_layernorm: float
    beam5_tokens_per_s: float
    beam5_x_layernorm: float


def norm_bench(cfg: BenchConfig) -> tuple[str, list[NormTiming]]:
    """The training precision timed and one row per norm."""
    device = torch.device(resolve_device("bench", cfg.device))
    precision, why = auto_precision("gpu" if device.type == "cuda" else "cpu")
    log.info("norms: training in %s (%s), decoding in fp32", precision, why)
    models = {}
    for norm in NORMS:
        torch.manual_seed(cfg.seed)
        models[norm] = Seq2SeqTransformer(cfg.model_config(norm=norm)).to(device)
    g = torch.Generator().manual_seed(cfg.seed)
    batches = [random_batch(cfg, g, device=device) for _ in range(cfg.warmup_steps + cfg.train_steps)]
    src, pad = decode_sources(cfg, g, device=device)

    def train(norm: str) -> tuple[float, float]:
        r = train_throughput(models[norm], seqlab_train_step(models[norm], cfg.label_smoothing), batches, precision,
                             cfg.warmup_steps)
        return r.tokens_per_s, r.step_s

    trained = best_of({n: lambda n=n: train(n) for n in NORMS}, cfg.train_repeats)
    for m in models.values():
        m.eval()
    decoded = {}
    for name, beams in BEAMS.items():
        runs = best_of({n: lambda n=n, beams=beams: seqlab_decode(models[n], src, pad, beams, cfg.max_new_tokens,
                                                                  memory=False, min_new=cfg.max_new_tokens)[:2]
                        for n in NORMS}, cfg.decode_repeats)
        decoded[name] = {n: sum(map(len, seqs)) / seconds for n, (seqs, seconds) in runs.items()}
    rows = []
    for n in NORMS:
        train_rate = trained[n][0]
        rows.append(NormTiming(n, train_rate, train_rate / trained["layernorm"][0],
                               decoded["greedy"][n], decoded["greedy"][n] / decoded["greedy"]["layernorm"],
                               decoded["beam5"][n], decoded["beam5"][n] / decoded["beam5"]["layernorm"]))
        log.info("norm=%s: train %.0f tok/s (%.2fx), greedy %.0f (%.2fx), beam 5 %.0f (%.2fx)", n, train_rate,
                 rows[-1].train_x_layernorm, rows[-1].greedy_tokens_per_s, rows[-1].greedy_x_layernorm,
                 rows[-1].beam5_tokens_per_s, rows[-1].beam5_x_layernorm)
    return precision, rows


def to_dict(rows: list[NormTiming]) -> list[dict]:
    return [asdict(r) for r in rows]
