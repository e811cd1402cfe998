"""LayerNorm against RMSNorm at the study's shape (`seqlab bench norms=true`): the speed half of Zhang & Sennrich's
"comparable BLEU, faster", rendered on the study's page beside the BLEU half. One record per CPU model
(results/bench_norms/norms-<cpu>.json)."""

from __future__ import annotations

from pathlib import Path

from pipelines.bench import bench_records, machine_heading
from pipelines.tables import table
from seqlab.pipeline.core import Pipeline, Stage, Table

DOC = "docs/experiments/arch_study_trained.md"
PRECISION = {"32-true": "fp32", "bf16-mixed": "bf16-mixed"}  # Lightning's names as the page writes them


def norms_table(record: dict) -> str:
    rows = record["result"]["norms"]
    body = [[r["norm"], f"{r['train_tokens_per_s']:,.0f} ({r['train_x_layernorm']:.2f}x)",
             f"{r['greedy_tokens_per_s']:,.0f} ({r['greedy_x_layernorm']:.2f}x)",
             f"{r['beam5_tokens_per_s']:,.0f} ({r['beam5_x_layernorm']:.2f}x)"] for r in rows]
    precision = PRECISION.get(record["result"]["precision"], record["result"]["precision"])
    return table(["norm", f"training, {precision}: tokens/s", "greedy, fp32: tokens/s", "beam 5, fp32: tokens/s"],
                 body)


def render(archive: Path) -> str:
    parts = []
    for record in bench_records(archive, "norms-*.json"):
        cfg = record["result"]["config"]
        shape = (f"d_model {cfg['d_model']}, {cfg['layers']}+{cfg['layers']} layers, vocabulary {cfg['vocab']:,}; "
                 f"training batches of {cfg['batch']} x {cfg['seq_len']} tokens, best of {cfg['train_repeats']}; "
                 f"{cfg['decode_sources']} random sources, {cfg['max_new_tokens']} new tokens each (EOS banned until "
                 f"then), untrained models, best of {cfg['decode_repeats']}; in brackets the speed against "
                 "LayerNorm's in the same run")
        parts.append(machine_heading(record, shape) + "\n\n" + norms_table(record))
    return "\n\n".join(parts) or f"_No archived norms bench yet: `make pipeline NAME={archive.name}`._"


PIPELINE = Pipeline(
    "bench_norms",
    "LayerNorm against RMSNorm at the study's shape: a training step and greedy/beam-5 decoding, on this CPU",
    (Stage("norms", "bench", ("norms=true",)),),
    (Table("arch_study_trained_rmsnorm_speed", render, DOC),),
)
