"""What the toolkits' decoding features cost (`seqlab bench features=true`): ensembles of 2 and 3 models, the
coverage penalty, contrastive search and lexical constraints, each against the plain search it extends, timed in
one run with random weights at the bench's default shape. One record per CPU model
(results/bench_features/features-<cpu>.json), one table per record on the performance page."""

from __future__ import annotations

from pathlib import Path

from pipelines.bench import bench_records, side_heading
from pipelines.tables import table
from seqlab.bench.features import from_dict
from seqlab.pipeline.core import Pipeline, Stage, Table

DOC = "docs/performance.md"


def render(archive: Path) -> str:
    parts = []
    for record in bench_records(archive, "features-*.json"):
        rows = [[r.name, r.base, f"{r.tokens / r.seconds:,.0f}", f"{r.seconds:.2f}", f"{r.cost:.2f}x"]
                for r in from_dict(record["result"]["features"])]
        cfg = record["result"]["config"]
        shape = f"; d_model {cfg['d_model']}, {cfg['layers']}+{cfg['layers']} layers, vocabulary {cfg['vocab']:,}"
        parts.append(side_heading(record, shape) + "\n\n"
                     + table(["decoding (random weights)", "against", "tokens/s", "seconds", "time vs against"], rows))
    return "\n\n".join(parts) or f"_No archived bench yet: `make pipeline NAME={archive.name}`._"


PIPELINE = Pipeline(
    "bench_features",
    "what ensembles, the coverage penalty, contrastive search and lexical constraints cost against the plain searches",
    (Stage("features", "bench", ("features=true",)),),
    (Table("bench_features", render, DOC),),
)
