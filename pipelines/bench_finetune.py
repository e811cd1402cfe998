"""Fine-tuning in bounded memory (`seqlab bench finetune=true`): a training step of random models at
mBART-large's, NLLB-1.3B's and flan-t5-large's shapes, every weight trained, LoRA (r 16 on the attention
projections) and LoRA with activation checkpointing, seqlab against Hugging Face's model with peft's adapters and
its gradient checkpointing, on the same batches: peak resident memory and tokens/s. One record per CPU model
(results/bench_finetune/finetune-<cpu>.json)."""

from __future__ import annotations

import statistics
from pathlib import Path

from pipelines.bench import bench_records, machine_heading
from pipelines.tables import table
from seqlab.bench.finetune import FinetuneRun, from_dict
from seqlab.pipeline.core import Pipeline, Stage, Table

DOC = "docs/performance.md"


def timed_as(ours: FinetuneRun, theirs: FinetuneRun, rounds: int | None) -> str:
    """How a row pair's speeds were measured: the median of alternating steps with both models built (then how
    many pairs of steps seqlab's step won, and the range of the pairs' ratios), or the fastest of runs in turn
    (then the ratio of the median runs and each side's slowest run over its fastest). Older records kept no
    runs: the rounds their record names."""
    if not ours.runs_s or not theirs.runs_s:
        return f"fastest of {rounds} runs in turn" if rounds else "-"
    if ours.timing == "paired":  # the i-th steps of the two sides ran one after the other
        pairs = [t / o for o, t in zip(ours.runs_s, theirs.runs_s, strict=True)]
        faster = sum(x > 1 for x in pairs)
        return (f"median of {len(pairs)} alternating steps; seqlab's the faster of a pair in {faster} of "
                f"{len(pairs)} ({min(pairs):.2f}x-{max(pairs):.2f}x)")
    spread = "; ".join(f"{side} {max(r.runs_s) / min(r.runs_s):.2f}" for side, r in (("seqlab", ours), ("HF", theirs)))
    median = statistics.median(theirs.runs_s) / statistics.median(ours.runs_s)
    return f"fastest of {len(ours.runs_s)} runs in turn (median runs {median:.2f}x; slowest/fastest: {spread})"


def render(archive: Path) -> str:
    parts = []
    for record in bench_records(archive, "finetune-*.json"):
        found = from_dict(record["result"]["finetune"])
        cfg, rounds = record["result"]["config"], record["result"].get("rounds")
        pairs = {(r.shape, r.mode): {} for r in found}
        for r in found:
            pairs[(r.shape, r.mode)][r.side] = r
        rows = []
        for (shape, mode), sides in pairs.items():
            ours, theirs = sides["seqlab"], sides["hf"]
            if ours.skipped:
                rows.append([shape, mode, f"{ours.parameters:,}", "-", "-", "-", "-", "-", "-",
                             f"not run: {ours.skipped}", "-"])
                continue
            rows.append([shape, mode, f"{ours.parameters:,}", f"{ours.trainable:,}", f"{theirs.trainable:,}",
                         f"{ours.peak_mb:,.0f}", f"{theirs.peak_mb:,.0f}", f"{ours.tokens_per_s:,.0f}",
                         f"{theirs.tokens_per_s:,.0f}", f"{ours.tokens_per_s / theirs.tokens_per_s:.2f}x",
                         timed_as(ours, theirs, rounds)])
        heading = machine_heading(record, f"random weights, batches of {cfg['batch']} x {cfg['seq_len']} source and "
                                          f"{cfg['seq_len']} target tokens, {cfg['warmup_steps']} warm-up step(s) a "
                                          f"run; a run alone: {cfg['train_steps']} timed steps")
        parts.append(heading + "\n\n" + table(
            ["shape", "fine-tuning", "parameters", "trained (seqlab)", "trained (HF + peft)", "peak MiB (seqlab)",
             "peak MiB (HF)", "tokens/s (seqlab)", "tokens/s (HF)", "seqlab vs HF", "timed as"],
            rows))
    return "\n\n".join(parts) or f"_No archived fine-tuning bench yet: `make pipeline NAME={archive.name}`._"


PIPELINE = Pipeline(
    "bench_finetune",
    "fine-tuning steps at mBART-large's, NLLB-1.3B's and flan-t5-large's shapes: full, LoRA, LoRA with activation "
    "checkpointing, against Hugging Face with peft",
    (Stage("finetune", "bench", ("finetune=true", "bench.batch=4", "bench.seq_len=32", "bench.train_steps=2",
                                 "bench.warmup_steps=1")),),
    (Table("bench_finetune", render, DOC),),
)
