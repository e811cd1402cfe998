"""Training speed of the three architectures at equal parameters (`seqlab bench language_models=true`): the
bench's encoder-decoder (3 + 3 layers at d 256, mt_bible_small's shape), a decoder-only LM and a prefix LM of
6 layers whose feed-forward width gives them as many layer parameters (`model.params.equal_parameter_stack`,
d_ff 1281 here, as conf/model/decoder_only_small.yaml), on the same random batches (64 x 40 source and 40
target tokens, no padding), each step forward, label-smoothed loss, backward and AdamW as training takes it.

A one-stack model reads source and target as one sequence of 80 tokens through all 6 layers, where the
encoder-decoder reads 40 through 3 and 40 through 3 (plus cross-attention): more FLOPs for the same tokens,
which tokens/s shows and MFU (model FLOPs over the step time and the measured matmul peak) accounts for.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

import torch

from seqlab.bench.speed import BenchConfig, matmul_peak, random_batch, seqlab_train_step, train_flops, train_throughput
from seqlab.hardware import BF16_FLAGS, best_of, cpu_flags
from seqlab.model import build_model
from seqlab.model.config import ModelConfig
from seqlab.model.params import analytic_counts, equal_parameter_stack

log = logging.getLogger("seqlab.bench")

ARCHITECTURES = ("encoder_decoder", "decoder_only", "prefix_lm")


@dataclass(frozen=True)
class ArchitectureTraining:
    """One architecture's training measurement in one precision (the fastest of the bench's repeats)."""

    architecture: str  # encoder_decoder | decoder_only | prefix_lm
    precision: str  # fp32 | bf16 (bf16-mixed autocast)
    layer_parameters: int  # the encoder's and decoder's (the one stack's): what the comparison holds equal
    d_ff: int
    tokens_per_s: float  # source + target tokens
    step_s: float
    peak_mem_mb: float
    step_flops: float  # forward + backward, analytic (bench.speed.train_flops)
    matmul_peak_flops: float  # this machine's measured matmul rate in the precision's dtype

    @property
    def mfu(self) -> float:
        """Model FLOPs utilization against the measured matmul peak."""
        return self.step_flops / self.step_s / self.matmul_peak_flops


def architecture_models(cfg: BenchConfig) -> dict[str, ModelConfig]:
    """The bench's encoder-decoder and the one-stack models at its layer parameter count."""
    base = cfg.model_config()
    return {"encoder_decoder": base, **{a: equal_parameter_stack(base, a) for a in ARCHITECTURES[1:]}}


def precisions() -> tuple[str, ...]:
    """fp32, and bf16-mixed where the CPU has bf16 matrix kernels (elsewhere its products fall back to fp32's
    kernels, and the measurement says nothing of bf16)."""
    return ("32", "bf16-mixed") if set(BF16_FLAGS) & cpu_flags() else ("32",)


def architecture_training(cfg: BenchConfig) -> list[ArchitectureTraining]:
    """Every architecture in every precision this CPU computes natively, on one CPU, the same batches."""
    g = torch.Generator().manual_seed(cfg.seed)
    batches = [random_batch(cfg, g) for _ in range(cfg.warmup_steps + cfg.train_steps)]
    shapes = architecture_models(cfg)
    rows = []
    for precision in precisions():
        torch.manual_seed(cfg.seed)
        models = {name: build_model(shape) for name, shape in shapes.items()}

        def run(name: str, precision: str = precision, models: dict = models) -> tuple[Any, float]:
            r = train_throughput(models[name], seqlab_train_step(models[name], cfg.label_smoothing), batches,
                                 precision, cfg.warmup_steps)
            return r, r.step_s

        best = best_of({name: lambda name=name: run(name) for name in models}, cfg.train_repeats)
        peak = matmul_peak(torch.float32 if precision == "32" else torch.bfloat16)
        tag = "fp32" if precision == "32" else "bf16"
        for name, shape in shapes.items():
            counts, throughput = analytic_counts(shape), best[name][0]
            rows.append(ArchitectureTraining(
                name, tag, counts.encoder + counts.decoder, shape.d_ff, throughput.tokens_per_s, throughput.step_s,
                throughput.peak_mem_mb, train_flops(shape, cfg.batch, cfg.seq_len, cfg.seq_len), peak))
            log.info("train %s %s: %.0f tok/s, MFU %.1f%%", tag, name, rows[-1].tokens_per_s, 100 * rows[-1].mfu)
    return rows


def to_dict(rows: list[ArchitectureTraining]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]


def from_dict(values: list[dict[str, Any]]) -> list[ArchitectureTraining]:
    return [ArchitectureTraining(**v) for v in values]
