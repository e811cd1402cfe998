"""Causal LMs decoding at real shapes (`seqlab bench language_models=true`): GPT-2 small and SmolLM-135M
(Llama's code, grouped-query attention) with random weights, seqlab against Hugging Face `generate` on the
same prompts and against CTranslate2's Generator on an export of the same model, greedy and beam 5, outputs
compared. One record per CPU model
(results/bench_language_models/language_models-<cpu>.json), one table per record."""

from __future__ import annotations

from pathlib import Path

from pipelines.bench import bench_records, side_heading
from pipelines.tables import table
from seqlab.bench.families import from_dict
from seqlab.pipeline.core import Pipeline, Stage, Table


def render(archive: Path) -> str:
    parts = []
    for record in bench_records(archive, "language_models-*.json"):
        found = from_dict(record["result"]["language_models"])
        with_ct2 = any(r.ct2_s is not None for r in found)  # records before the Generator export have none
        rows = [[r.shape, r.decoding, f"{r.tokens / r.seqlab_s:,.0f}", f"{r.hf_s and r.tokens / r.hf_s:,.0f}",
                 f"{r.x_hf:.2f}x", f"{r.equal_hf} of {r.sources}",
                 *([f"{r.x_ct2:.2f}x" if r.ct2_s else "-", f"{r.equal_ct2} of {r.sources}" if r.ct2_s else "-"]
                   if with_ct2 else [])] for r in found]
        header = ["shape (random weights)", "decoding", "seqlab tokens/s", "generate tokens/s", "seqlab vs generate",
                  "outputs equal generate's", *(["seqlab vs CTranslate2", "outputs equal CTranslate2's"]
                                                if with_ct2 else [])]
        parts.append(side_heading(record) + "\n\n" + table(header, rows))
    return "\n\n".join(parts) or f"_No archived bench yet: `make pipeline NAME={archive.name}`._"


PIPELINE = Pipeline(
    "bench_language_models", "causal LMs decoding at GPT-2 small's and SmolLM-135M's shapes against generate",
    (Stage("language_models", "bench", ("language_models=true",)),),
    (Table("bench_language_models", render, "docs/language_models.md"),),
)
