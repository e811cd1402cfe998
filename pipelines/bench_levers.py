"""What each training lever gives (`seqlab bench levers=true`): the output projection fused with the loss, its
arithmetic compiled and the compiled layers, alone and combined, against the plain bf16-mixed step and Hugging
Face's, in one run. One record per CPU model (results/bench_levers/levers-<cpu>.json); a GPU's records are
bench_gpu's `levers` stage."""

from __future__ import annotations

from pathlib import Path

from pipelines.bench import bench_records, machine_heading
from pipelines.tables import commit_of, table
from seqlab.pipeline.core import Pipeline, Stage, Table

DOC = "docs/performance.md"


def levers_table(record: dict) -> str:
    """One record's table: each variant's tokens/s against the plain step and HF, MFU, memory, warm-up."""
    rows = record["result"]["levers"]
    plain = next(r for r in rows if r["name"] == "plain")
    hf = next(r for r in rows if r["name"] == "Hugging Face")
    body = [[r["name"], f"{r['tokens_per_s']:,.0f}", f"{r['tokens_per_s'] / plain['tokens_per_s']:.2f}x",
             f"{r['tokens_per_s'] / hf['tokens_per_s']:.2f}x", f"{r['mfu']:.1%}", f"{r['peak_mb']:,.0f}",
             f"{r['warmup_s']:.1f}", "" if r["loss_delta"] is None else f"{r['loss_delta']:+.1e}"] for r in rows]
    precision = record["result"].get("precision", "bf16-mixed")
    return table([f"{precision} training step", "tokens/s", "vs plain", "vs HF", "MFU", "peak MiB",
                  "warm-up s (compile)", "loss - plain's"], body)


def heading(record: dict) -> str:
    """The line above a levers table: the device (a GPU's record) or the CPU (`machine_heading`), and the shape."""
    result, man, cfg = record["result"], record["manifest"], record["result"]["config"]
    shape = (f"d_model {cfg['d_model']}, {cfg['layers']}+{cfg['layers']} layers, vocabulary {cfg['vocab']:,}, batches "
             f"of {cfg['batch']} x {cfg['seq_len']} tokens, {cfg['train_steps']} steps after {cfg['warmup_steps']}, "
             f"best of {cfg['train_repeats']}")
    if result.get("device", "cpu") != "cpu":
        return (f"**{result['device']}** (host {man['cpu']}; torch {man['torch']}; commit {commit_of(man)}; "
                f"{man['date'][:10]}; {shape})")
    return machine_heading(record, shape)


def render(archive: Path, pattern: str = "levers-*.json") -> str:
    parts = [heading(r) + "\n\n" + levers_table(r) for r in bench_records(archive, pattern)]
    return "\n\n".join(parts) or f"_No archived levers bench yet: `make pipeline NAME={archive.name}`._"


PIPELINE = Pipeline(
    "bench_levers",
    "the training levers (fused loss, compiled loss and layers, bf16 weights) against the plain step and "
    "Hugging Face, on this CPU",
    (Stage("levers", "bench", ("levers=true",)),),
    (Table("bench_levers", render, DOC),),
)
