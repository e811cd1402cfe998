"""COMET's cost in an evaluation (`seqlab bench comet=true`): a sweep of five systems on 200 Bible test
sentences scored by seqlab and by unbabel-comet's `predict`, and MBR with a COMET utility (16 sources x 16
candidates) by seqlab and by comet-mbr, on one random COMET model at a small XLM-R shape, every score
compared. unbabel-comet runs in its own environment (.venv-comet, `make comet-fixtures`); without it the
record has seqlab's side only. One record per CPU model (results/bench_neural/)."""

from __future__ import annotations

from pathlib import Path

from pipelines.bench import bench_records, machine_heading
from pipelines.tables import ratio, table
from seqlab.pipeline.core import Pipeline, Stage, Table

LIBRARY_PYTHON = ".venv-comet/bin/python"  # relative to the checkout the pipeline runs in


def render(archive: Path) -> str:
    parts = []
    for record in bench_records(archive, "comet-*.json"):
        rows = [[r["task"], f"{r['items']:,}", f"{r['seqlab_s']:.2f}", str(r["encoded"]),
                 "–" if r["library_s"] is None else f"{r['library_s']:.2f}",
                 ratio(r["x_library"]),
                 "–" if r["max_diff"] is None else f"{r['max_diff']:.1e}"]
                for r in record["result"]["neural"]]
        heading = machine_heading(record, "a random COMET regression model (XLM-R shape: 6 layers, d 256), fp32")
        parts.append(heading + "\n\n" + table(
            ["task", "items", "seqlab (s)", "sentences seqlab encoded", "unbabel-comet (s)", "seqlab faster",
             "largest score difference"], rows))
    return "\n\n".join(parts) or f"_No archived COMET bench yet: `make pipeline NAME={archive.name}`._"


PIPELINE = Pipeline(
    "bench_neural",
    "COMET scoring of a sweep and COMET-MBR, seqlab against unbabel-comet and comet-mbr on one model",
    (Stage("comet", "bench", ("comet=true", f"comet_python={LIBRARY_PYTHON}")),),
    (Table("bench_neural", render, "docs/neural_metrics.md"),
     Table("bench_neural_performance", render, "docs/performance.md")),
)
