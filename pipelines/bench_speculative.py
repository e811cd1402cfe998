"""Speculative decoding on the reference models (`seqlab bench speculative=true` after each reference training):
each decodes its test set greedily, with prompt lookup (k = 2, 5 and adaptive) and with CTranslate2's greedy
search beside, tokens/s against plain greedy, the share of proposals kept, tokens per decoder call and the
outputs equal to plain greedy's. One record per model and CPU model (results/bench_speculative/)."""

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
            rows = [[r.setting, f"{r.tokens_per_s:,.0f}", f"{r.speedup:.2f}x", f"{r.equal} / {r.sources}",
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


PIPELINE = Pipeline(
    "bench_speculative",
    "speculative decoding (prompt lookup) against plain greedy search and CTranslate2 on both reference models",
    tuple(stage for name, (experiment, train) in MODELS.items() for stage in (
        *trained_then_decoded(experiment, {}, train_name=train),
        Stage(f"speculative_{name}", "bench", ("speculative=true", "bench.decode_sources=0"), after=train))),
    (Table("bench_speculative", render, DOC),),
)
