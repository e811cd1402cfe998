"""Training and decoding speed of the three architectures at equal parameters.

Training (`seqlab bench language_models=true`): the bench's encoder-decoder (3 + 3 layers at d 256,
mt_bible_small's shape), a decoder-only LM and a prefix LM of 6 layers whose feed-forward width gives them as
many layer parameters (`model.params.equal_parameter_stack`, d_ff 1281 here, as
conf/model/decoder_only_small.yaml), on the same random batches (64 x 40 source and 40 target tokens, no
padding), each step forward, label-smoothed loss, backward and AdamW as training takes it.

A one-stack model reads source and target as one sequence of 80 tokens through all 6 layers, where the
encoder-decoder reads 40 through 3 and 40 through 3 (plus cross-attention): more FLOPs for the same tokens,
which tokens/s shows and MFU (model FLOPs over the step time and the measured matmul peak) accounts for.

Decoding (`seqlab bench architectures=true`): the same three models, random weights, continue the same random
sources greedily and with beam search, every output forced to `max_new_tokens` (no end token before, none
after), so that each does the same number of steps and only the architecture differs. At each step a one-stack
model runs its 6 layers over one token whose keys include the whole source, where the encoder-decoder runs 3
(self-attention over the target, cross-attention over the source); the sources are timed at several lengths,
so that the cost of the source in every step shows as the slope of tokens/s against source length.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

import torch

from seqlab.bench.speed import BenchConfig, matmul_peak, random_batch, seqlab_train_step, train_flops, train_throughput
from seqlab.decoding import DecodingConfig, generate
from seqlab.hardware import BF16_FLAGS, best_of, cpu_flags, timed
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


def to_dict(rows: list[ArchitectureTraining] | list[ArchitectureDecoding]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]


def from_dict(values: list[dict[str, Any]]) -> list[ArchitectureTraining]:
    return [ArchitectureTraining(**v) for v in values]


# the sources' lengths timed, in multiples of the bench's seq_len: a Bible verse's length (the study's data), half
# of it and twice it
SOURCE_SCALES = (0.5, 1, 2)


@dataclass(frozen=True)
class ArchitectureDecoding:
    """One architecture decoding the bench's sources of one length with one search, fp32 (the fastest run)."""

    architecture: str  # encoder_decoder | decoder_only | prefix_lm
    decoding: str  # greedy | beam<K>
    source_tokens: int  # every source's length (no padding)
    sources: int
    tokens: int  # generated: sources x max_new_tokens, every output forced to that length
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


def decode_from_dict(values: list[dict[str, Any]]) -> list[ArchitectureDecoding]:
    return [ArchitectureDecoding(**v) for v in values]


def forced_length(beams: int, length: int) -> DecodingConfig:
    """Greedy or beam search whose every output is `length` tokens: the end token banned before (min_length)
    and the search stopped at (max_length) that length, so that every architecture takes the same steps."""
    return DecodingConfig(method="beam" if beams > 1 else "greedy", num_beams=beams, min_length=length,
                          max_length=length, suppress_special=False)


def random_full_sources(n: int, length: int, vocab: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """n sources of exactly `length` tokens (ids past the special ones), no padding: (ids, pad mask)."""
    ids = torch.randint(4, vocab, (n, length), generator=g)
    return ids, torch.zeros_like(ids, dtype=torch.bool)


def architecture_decoding(cfg: BenchConfig) -> list[ArchitectureDecoding]:
    """Every architecture, greedy and beam `num_beams`, on `decode_sources` random sources at each length of
    SOURCE_SCALES x seq_len, each output `max_new_tokens` long; the architectures alternate within each repeat
    (`hardware.best_of`), on one CPU, in fp32."""
    shapes = architecture_models(cfg)
    torch.manual_seed(cfg.seed)
    models = {name: build_model(shape).eval() for name, shape in shapes.items()}
    g = torch.Generator().manual_seed(cfg.seed)
    rows = []
    for scale in SOURCE_SCALES:
        length = max(1, round(scale * cfg.seq_len))
        src, pad = random_full_sources(cfg.decode_sources, length, cfg.vocab, g)
        for beams in (1, cfg.num_beams):
            decoding = forced_length(beams, cfg.max_new_tokens)

            def run(name: str, decoding: DecodingConfig = decoding, src: torch.Tensor = src,
                    pad: torch.Tensor = pad) -> tuple[int, float]:
                out, seconds = timed(lambda: generate(models[name], src, pad, decoding))
                return int(out.lengths[:, 0].sum()), seconds

            for name in models:  # a warm-up each: the first run pays the allocator's page faults
                run(name)
            best = best_of({name: lambda name=name: run(name) for name in models}, cfg.decode_repeats)
            label = "greedy" if beams == 1 else f"beam{beams}"
            for name, (tokens, seconds) in best.items():
                rows.append(ArchitectureDecoding(name, label, length, src.shape[0], tokens, seconds))
                log.info("decode %s %s, sources of %d: %.0f tok/s", label, name, length, rows[-1].tokens_per_s)
    return rows
