"""Speculative decoding on the reference models (`seqlab bench speculative=true` after each reference training):
each decodes its test set greedily, with prompt lookup (k = 2, 5 and adaptive) and with CTranslate2's greedy
search and Hugging Face's greedy search and prompt lookup (one source a call) beside, tokens/s against plain
greedy (generate's rows: against its own), the share of proposals kept, tokens per decoder call and the
outputs equal to plain greedy's; and prompt lookup on a random model of GPT-2 small's shape at batches of 1, 8, 32
and 64, on seqlab's engine and oneDNN's (what verifying several positions per call costs on this CPU). One record per
model and CPU model (results/bench_speculative/)."""

from __future__ import annotations

from pathlib import Path

from pipelines.bench import bench_records, machine_heading
from pipelines.core import trained_then_decoded
from pipelines.tables import table
from seqlab.bench.speculative import from_dict
from seqlab.pipeline.core import Pipeline, Stage, Table

DOC = "docs/experiments/speculative.md"
MODELS = {"mt": ("mt_bible_small", "train"), "sum": ("sum_debian_small", "sum_train")}


def render(archive: Path) -> str:
    parts = []
    for name in MODELS:
        for record in bench_records(archive, f"speculative_{name}-*.json"):
            rows = [[f"{r.model}: {r.setting}, one source a call" if r.model else r.setting,
                     f"{r.tokens_per_s:,.0f}", f"{r.speedup:.2f}x", f"{r.equal} / {r.sources}",
                     "-" if r.acceptance is None else f"{r.acceptance:.1%}",
                     "-" if r.tokens_per_call is None else f"{r.tokens_per_call:.2f}",
                     "-" if r.draft_seconds is None else f"{r.draft_seconds:.2f}"]
                    for r in from_dict(record["result"]["speculative"])]
            cfg = record["result"]["config"]
            heading = machine_heading(record, f"the {MODELS[name][0]} reference model's test set, fp32, best of "
                                              f"{cfg['decode_repeats']}")
            parts.append(heading + "\n\n" + table(
                ["decoding", "tokens/s", "vs greedy", "outputs equal greedy's", "proposals kept", "tokens / call",
                 "proposing (s)"], rows))
    return "\n\n".join(parts) or f"_No archived speculative bench yet: `make pipeline NAME={archive.name}`._"


def render_gpt2(archive: Path) -> str:
    parts = []
    for record in bench_records(archive, "speculative_gpt2-*.json"):
        rows = [[r.model.split(", ")[-1], str(r.batch), r.setting, f"{r.tokens_per_s:,.0f}", f"{r.speedup:.2f}x",
                 f"{r.equal} / {r.sources}", "-" if r.acceptance is None else f"{r.acceptance:.1%}",
                 "-" if r.tokens_per_call is None else f"{r.tokens_per_call:.2f}"]
                for r in from_dict(record["result"]["speculative"])]
        cfg = record["result"]["config"]
        prompts = max(r["batch"] for r in record["result"]["speculative"])
        heading = machine_heading(record, f"a random model of GPT-2 small's shape, {prompts} random prompts of "
                                          f"{cfg['seq_len'] // 2}-{cfg['seq_len']} tokens, {cfg['max_new_tokens']} new "
                                          f"tokens at most, fp32, best of {cfg['decode_repeats']}")
        parts.append(heading + "\n\n" + table(
            ["engine", "prompts per call", "decoding", "tokens/s", "vs greedy", "outputs equal greedy's",
             "proposals kept", "tokens / call"], rows))
    return "\n\n".join(parts) or f"_No archived speculative bench yet: `make pipeline NAME={archive.name}`._"


PIPELINE = Pipeline(
    "bench_speculative",
    "speculative decoding (prompt lookup) against plain greedy search and CTranslate2 on both reference models",
    tuple(stage for name, (experiment, train) in MODELS.items() for stage in (
        *trained_then_decoded(experiment, {}, train_name=train),
        Stage(f"speculative_{name}", "bench", ("speculative=true", "bench.decode_sources=0"), after=train)))
    + (Stage("speculative_gpt2", "bench", ("speculative=true", "bench.decode_repeats=2")),),
    (Table("bench_speculative", render, DOC), Table("bench_speculative_gpt2", render_gpt2, "docs/performance.md")),
)
