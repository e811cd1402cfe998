"""Fine-tuning in bounded memory (`seqlab bench finetune=true`): one training step of random models at the shapes
users fine-tune (mBART-large, NLLB-1.3B, flan-t5-large), each built from its family's transformers config class
(nothing downloaded), in three modes: every weight trained, low-rank adapters (LoRA, r 16 on the attention
projections), and LoRA with activation checkpointing; seqlab (the same shape through `interop.catalog`) against
Hugging Face's model with peft's adapters and its gradient checkpointing, on the same random batches, AdamW on
what trains. Each run builds its model alone in the process and reads the peak resident memory from before the
build to after the last step (weights, gradients, optimizer state, activations), so a run's peak is its own.
The step times then come from both models built together, their steps alternating (`paired_steps`), where the
two fit in the machine's memory; else the toolkits take turns, `ROUNDS` runs each, and a row keeps its side's
fastest step (`finetune_bench` says why).

Both sides compute the same step, without randomness: every dropout and LayerDrop of the family's config is
set to zero (`STILL`). The families' defaults would leave some on: M2M100/NLLB's config skips each layer with
probability 0.05 in training (LayerDrop: ~5% of the layers' work left out of a step, at random) and keeps
attention dropout at 0.1; T5 names its dropout `dropout_rate`.

A mode whose weights, gradients and AdamW state (16 bytes a trained parameter, 4 a frozen one) would not fit the
machine's memory is not run; the row says so (NLLB-1.3B's full fine-tuning on a 24 GiB machine).
"""

from __future__ import annotations

import gc
import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

from seqlab.bench.speed import (
    BenchConfig,
    bench_optimizer,
    hf_train_step,
    peak_memory_mb,
    reset_peak_memory,
    seqlab_train_step,
)

log = logging.getLogger("seqlab.bench")

BART_STILL = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, encoder_layerdrop=0.0,
                  decoder_layerdrop=0.0)
STILL = {"mbart": BART_STILL, "m2m_100": BART_STILL, "t5": dict(dropout_rate=0.0)}  # no dropout, no LayerDrop
SHAPES: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {  # family, config, its attention projections
    "mbart-large": ("mbart", dict(vocab_size=250027, d_model=1024, encoder_layers=12, decoder_layers=12,
                                  encoder_attention_heads=16, decoder_attention_heads=16, encoder_ffn_dim=4096,
                                  decoder_ffn_dim=4096, max_position_embeddings=1024, scale_embedding=True,
                                  pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2),
                    ("q_proj", "k_proj", "v_proj", "out_proj")),
    "nllb-1.3b": ("m2m_100", dict(vocab_size=256206, d_model=1024, encoder_layers=24, decoder_layers=24,
                                  encoder_attention_heads=16, decoder_attention_heads=16, encoder_ffn_dim=8192,
                                  decoder_ffn_dim=8192, max_position_embeddings=1024, scale_embedding=True,
                                  pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2),
                  ("q_proj", "k_proj", "v_proj", "out_proj")),
    "flan-t5-large": ("t5", dict(vocab_size=32128, d_model=1024, d_kv=64, d_ff=2816, num_layers=24,
                                 num_decoder_layers=24, num_heads=16, feed_forward_proj="gated-gelu",
                                 tie_word_embeddings=False, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0),
                      ("q", "k", "v", "o")),
}
MODES = ("full", "lora", "lora + checkpointing")
SIDES = ("seqlab", "hf")
# runs of each side per shape and mode, taking turns: on the 2-core AVX-512 EPYC one model's steps agreed within
# 3% while two runs of the same side, same process, differed by up to 25% (3.0 s and 3.7 s a step at
# flan-t5-large's LoRA), so a row's fastest step needs a few runs to find the machine's faster state
ROUNDS = 3
# timed steps of each side where both models fit together, alternating after the warm-up: each pair of steps
# meets one machine state, so the median step of each side compares (the flan-t5-large LoRA step read 1.05x and
# 0.86x HF's in two AVX-512 records of runs in turn, commits 006475e and b7ad3ce)
PAIRED_STEPS = 6
FIT = 0.8  # share of the machine's memory a run (or two models together) may take
LORA_R, LORA_ALPHA = 16, 32.0


@dataclass(frozen=True)
class FinetuneRun:
    """One shape, mode and toolkit: its step time and peak memory (None: not run, `skipped` says why)."""

    shape: str
    mode: str
    side: str  # seqlab | hf
    parameters: int
    trainable: int
    tokens_per_s: float | None
    step_s: float | None
    peak_mb: float | None
    skipped: str | None = None
    runs_s: list[float] | None = None  # every run's (turns) or every step's (paired) seconds, in order
    timing: str = "turns"  # turns: step_s the fastest of runs in turn; paired: the median of alternating steps


def machine_mb() -> float:
    """The machine's memory, MiB (/proc/meminfo's MemTotal)."""
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("MemTotal:")) / 1024


def state_mb(parameters: int, trainable: int) -> float:
    """Weights, gradients and AdamW's two moments in fp32: 16 bytes a trained parameter, 4 a frozen one."""
    return (16 * trainable + 4 * (parameters - trainable)) / 2**20


def batches(cfg: BenchConfig, vocab: int, steps: int) -> list[dict[str, torch.Tensor]]:
    """Random full-length batches (bench.batch x bench.seq_len source and target tokens), ids above the
    families' special ones."""
    g = torch.Generator().manual_seed(cfg.seed)
    out = []
    for _ in range(steps):
        src = torch.randint(4, vocab, (cfg.batch, cfg.seq_len), generator=g)
        tgt = torch.randint(4, vocab, (cfg.batch, cfg.seq_len), generator=g)
        tgt_in = torch.cat([torch.full((cfg.batch, 1), 2), tgt[:, :-1]], 1)
        out.append({"src": src, "pad": torch.zeros_like(src, dtype=torch.bool), "tgt_in": tgt_in, "tgt": tgt})
    return out


def seqlab_model(kind: str, values: dict[str, Any], mode: str) -> torch.nn.Module:
    from transformers import AutoConfig

    from seqlab.interop.catalog import model_config
    from seqlab.model import build_model
    from seqlab.train.config import LoraConfig
    from seqlab.train.levers import checkpoint_layers
    from seqlab.train.lora import add_adapters

    torch.manual_seed(0)
    model = build_model(model_config(AutoConfig.for_model(kind, **values, **STILL[kind]).to_dict()))
    if mode != "full":
        add_adapters(model, LoraConfig(r=LORA_R, alpha=LORA_ALPHA, targets="attention"))
    if mode == "lora + checkpointing":
        checkpoint_layers(model)
    return model


def hf_model(kind: str, values: dict[str, Any], mode: str, targets: tuple[str, ...]) -> torch.nn.Module:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(AutoConfig.for_model(kind, **values, **STILL[kind]))
    if mode == "lora + checkpointing":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()  # frozen embeddings: the checkpointed layers still need a graph
    if mode != "full":
        model = get_peft_model(model, LoraConfig(r=LORA_R, lora_alpha=LORA_ALPHA, target_modules=list(targets)))
    return model


Shape = tuple[str, dict[str, Any], tuple[str, ...]]


def one_run(cfg: BenchConfig, shape: str, spec: Shape, mode: str, side: str) -> FinetuneRun:
    """Build the model, take warm-up and timed steps, read the peak; the model is freed before returning."""
    reset_peak_memory()
    seconds, parameters, trainable = timed_steps(cfg, build(spec, mode, side), side, spec[1]["vocab_size"])
    peak = peak_memory_mb()
    gc.collect()
    log.info("%s %s %s: %.1f s a step, peak %.0f MiB", shape, mode, side, seconds, peak)
    return FinetuneRun(shape, mode, side, parameters, trainable, rate(cfg, seconds), seconds, peak)


def rate(cfg: BenchConfig, step_s: float) -> float:
    """A step's tokens (the batch's source and target tokens) over its seconds."""
    return 2 * cfg.batch * cfg.seq_len / step_s


def build(spec: Shape, mode: str, side: str) -> torch.nn.Module:
    """`side`'s model of the shape in `mode` (seqlab's, or Hugging Face's with peft's adapters)."""
    kind, values, targets = spec
    return seqlab_model(kind, values, mode) if side == "seqlab" else hf_model(kind, values, mode, targets)


def trainer(model: torch.nn.Module, side: str) -> Callable[[dict[str, torch.Tensor]], float]:
    """batch -> seconds of one training step of `model` (forward, label-smoothed loss, backward, AdamW on what
    has gradients)."""
    model.train()
    step = seqlab_train_step(model, 0.1) if side == "seqlab" else hf_train_step(model, 0.1)
    opt = bench_optimizer(model)  # AdamW as training builds it; it skips the frozen weights (no gradient)

    def train(b: dict[str, torch.Tensor]) -> float:
        start = time.perf_counter()
        step(b).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - start
    return train


def timed_steps(cfg: BenchConfig, model: torch.nn.Module, side: str, vocab: int) -> tuple[float, int, int]:
    """(seconds a step after the warm-up steps, parameters, trainable parameters) of `model`'s training steps."""
    train = trainer(model, side)
    seconds = [train(b) for b in batches(cfg, vocab, cfg.warmup_steps + cfg.train_steps)][cfg.warmup_steps:]
    return (sum(seconds) / max(len(seconds), 1), sum(p.numel() for p in model.parameters()),
            sum(p.numel() for p in model.parameters() if p.requires_grad))


def paired_steps(cfg: BenchConfig, spec: Shape, mode: str, steps: int) -> dict[str, list[float]]:
    """Both sides' models built together and trained in alternating steps (seqlab, HF, seqlab, ...) on the same
    batches, `steps` timed steps each after `cfg.warmup_steps`: each side's step seconds, in order."""
    trainers = {side: trainer(build(spec, mode, side), side) for side in SIDES}
    seconds: dict[str, list[float]] = {side: [] for side in SIDES}
    for i, b in enumerate(batches(cfg, spec[1]["vocab_size"], cfg.warmup_steps + steps)):
        for side, train in trainers.items():
            took = train(b)
            if i >= cfg.warmup_steps:
                seconds[side].append(took)
    del trainers
    gc.collect()
    return seconds


def finetune_bench(cfg: BenchConfig, shapes: dict[str, Shape] | None = None, rounds: int = ROUNDS,
                   steps: int = PAIRED_STEPS) -> list[FinetuneRun]:
    """Every shape and mode, one seqlab and one Hugging Face row (a mode that cannot fit is a skipped row).

    Each side first runs alone, for its peak memory. The machine's speed drifts by 10-25% within minutes, so
    runs in sequence measure the drift between them as much as the toolkits: where the two peaks together fit
    in FIT of the machine's memory, the step times are `paired_steps`' (`steps` a side, each row the median of
    its side's); else the sides take turns, `rounds` runs each (seqlab, HF, seqlab, HF, ...), and each row
    keeps its side's fastest step and largest peak."""
    available = machine_mb()
    rows = []
    for shape, spec in (shapes or SHAPES).items():
        for mode in MODES:
            alone = [run_or_skip(cfg, shape, spec, mode, side, available) for side in SIDES]
            if steps and not any(r.skipped for r in alone) and sum(r.peak_mb for r in alone) <= FIT * available:
                seconds = paired_steps(cfg, spec, mode, steps)
                rows += [paired_row(cfg, r, seconds[r.side]) for r in alone]
                continue
            runs = alone + [run_or_skip(cfg, shape, spec, mode, side, available) for _ in range(rounds - 1)
                            for side in SIDES]
            rows += [best_of([r for r in runs if r.side == side]) for side in SIDES]
    return rows


def paired_row(cfg: BenchConfig, alone: FinetuneRun, seconds: list[float]) -> FinetuneRun:
    """A side's row from its run alone (its peak) and its alternating steps (the median one)."""
    step = statistics.median(seconds)
    log.info("%s %s %s: %.2f s a step, the median of %d alternating steps", alone.shape, alone.mode, alone.side,
             step, len(seconds))
    return replace(alone, step_s=step, tokens_per_s=rate(cfg, step), runs_s=seconds,
                   timing="paired")


def best_of(runs: list[FinetuneRun]) -> FinetuneRun:
    """One side's runs of a shape and mode as one row: the fastest step, the largest peak memory, and every
    run's step (`runs_s`: how far the machine's speed moved the runs apart)."""
    timed = [r for r in runs if r.step_s is not None]
    if not timed:
        return runs[0]  # skipped: every run says why alike
    fastest = min(timed, key=lambda r: r.step_s)
    return replace(fastest, peak_mb=max(r.peak_mb for r in timed), runs_s=[r.step_s for r in timed])


def run_or_skip(cfg: BenchConfig, shape: str, spec: Shape, mode: str, side: str, available: float) -> FinetuneRun:
    """`one_run`, unless full fine-tuning's state alone would not fit FIT of `available` MiB (from seqlab's
    analytic parameter count of the shape: nothing allocated)."""
    if mode == "full":
        from transformers import AutoConfig

        from seqlab.interop.catalog import model_config
        from seqlab.model.params import analytic_counts

        kind, values, _ = spec
        parameters = analytic_counts(model_config(AutoConfig.for_model(kind, **values).to_dict())).total
        need = state_mb(parameters, parameters)
        if need > FIT * available:
            why = (f"weights, gradients and AdamW state need {need / 1024:.1f} GiB of this machine's "
                   f"{available / 1024:.1f} GiB")
            log.info("%s full %s: skipped (%s)", shape, side, why)
            return FinetuneRun(shape, mode, side, parameters, parameters, None, None, None, why)
    return one_run(cfg, shape, spec, mode, side)


def to_dict(rows: list[FinetuneRun]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]


def from_dict(values: list[dict[str, Any]]) -> list[FinetuneRun]:
    return [FinetuneRun(**v) for v in values]
