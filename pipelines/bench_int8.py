"""int8 decoding (`seqlab bench int8=true`): at the families' and causal LMs' real shapes with random weights,
seqlab's int8 engine, eager and compiled, against CTranslate2 int8, greedy and beam 5, 64 sources a call and the
first 16 one a call, each toolkit's outputs compared with seqlab fp32's. One record per CPU model
(results/bench_int8/int8-<cpu>.json), one table per record on the performance page."""

from __future__ import annotations

from pathlib import Path

from pipelines.bench import bench_records, machine_heading
from pipelines.tables import of, ratio, table
from seqlab.bench.int8 import from_dict
from seqlab.pipeline.core import Pipeline, Stage, Table

DOC = "docs/performance.md"


def render(archive: Path) -> str:
    parts = []
    for record in bench_records(archive, "int8-*.json"):
        found = from_dict(record["result"]["int8"])
        cfg = record["result"]["config"]
        rows = [[r.shape, r.decoding + (", one source a call" if r.one_at_a_time else ""),
                 f"{r.tokens / r.seqlab_s:,.0f}", ratio(r.x_ct2), ratio(r.compiled_x_ct2),
                 "–" if r.first_pass_s is None else f"{r.first_pass_s:.0f} s",
                 of(r.equal_compiled, r.sources), of(r.equal_fp32, r.sources),
                 of(r.compiled_equal_fp32, r.sources), of(r.ct2_equal_fp32, r.sources)] for r in found]
        header = ["shape (random weights)", "decoding", "seqlab int8 tokens/s", "vs CTranslate2 int8",
                  "compiled vs CTranslate2 int8", "compiled's first pass", "compiled's outputs equal eager int8's",
                  "seqlab int8 outputs equal seqlab fp32's", "compiled int8's equal seqlab fp32's",
                  "CTranslate2 int8's equal seqlab fp32's"]
        what = (f"{cfg['decode_sources']} random sources of {cfg['seq_len'] // 2}-{cfg['seq_len']} tokens, "
                f"{cfg['max_new_tokens']} new tokens at most, best of {cfg['decode_repeats']}")
        parts.append(machine_heading(record, what) + "\n\n" + table(header, rows))
    return "\n\n".join(parts) or f"_No archived bench yet: `make pipeline NAME={archive.name}`._"


PIPELINE = Pipeline(
    "bench_int8", "int8 decoding at the families' and causal LMs' shapes: seqlab's int8 engine, eager and compiled, "
    "against CTranslate2 int8", (Stage("int8", "bench", ("int8=true",)),),
    (Table("bench_int8", render, DOC),),
)
