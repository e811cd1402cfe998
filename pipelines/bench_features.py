"""What the toolkits' decoding features cost (`seqlab bench features=true`): ensembles of 2 and 3 models, the
coverage penalty and contrastive search, each against the plain search it extends, timed in one run with random
weights at the bench's default shape. One record per CPU model (results/bench_features/features-<cpu>.json),
one table per record on the performance page."""

from __future__ import annotations

from pathlib import Path

from pipelines.bench import bench_records
from pipelines.core import Pipeline, Stage, Table
from pipelines.tables import commit_of, table
from seqlab.analysis.bench_features import from_dict

DOC = "docs/performance.md"


def render(archive: Path) -> str:
    parts = []
    for record in bench_records(archive, "features-*.json"):
        result, man = record["result"], record["manifest"]
        rows = [[r.name, r.base, f"{r.tokens / r.seconds:,.0f}", f"{r.seconds:.2f}", f"{r.cost:.2f}x"]
                for r in from_dict(result["features"])]
        cfg = result["config"]
        parts.append(f"**{man['cpu']}** ({', '.join(man['cpu_flags']) or 'no bf16/AMX flags'}; {result['threads']} "
                     f"threads; torch {man['torch']}; commit {commit_of(man)}; {man['date'][:10]}; other processes' "
                     f"load {result['others_busy_cores']:.2f} cores; d_model {cfg['d_model']}, {cfg['layers']}+"
                     f"{cfg['layers']} layers, vocabulary {cfg['vocab']:,}; {cfg['decode_sources']} random sources "
                     f"of {cfg['seq_len'] // 2}-{cfg['seq_len']} tokens, {cfg['max_new_tokens']} new tokens at most, "
                     f"fp32, best of {cfg['decode_repeats']})\n\n"
                     + table(["decoding (random weights)", "against", "tokens/s", "seconds", "time vs against"], rows))
    return "\n\n".join(parts) or f"_No archived bench yet: `make pipeline NAME={archive.name}`._"


PIPELINE = Pipeline(
    "bench_features", "what ensembles, the coverage penalty and contrastive search cost against the plain searches",
    (Stage("features", "bench", ("features=true",)),),
    (Table("bench_features", render, DOC),),
)
