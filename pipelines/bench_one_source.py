"""One source a call (`seqlab bench one_source=true`): at the families' and the causal LMs' real shapes with random
weights, the first 16 sources decoded one per call by seqlab's default engine, `engine=seqlab_compiled` (the
decoder step compiled for a CPU) and CTranslate2 fp32, greedy and beam 5, outputs compared. One record per CPU
model (results/bench_one_source/one_source-<cpu>.json), one table per record on the performance page."""

from __future__ import annotations

from pathlib import Path

from pipelines.bench import bench_records, machine_heading
from pipelines.tables import of, ratio, table
from seqlab.bench.one_source import from_dict
from seqlab.pipeline.core import Pipeline, Stage, Table

DOC = "docs/performance.md"


def render(archive: Path) -> str:
    parts = []
    for record in bench_records(archive, "one_source-*.json"):
        found = from_dict(record["result"]["one_source"])
        cfg = record["result"]["config"]
        rows = [[r.shape, r.decoding, f"{r.tokens / r.compiled_s:,.0f}", f"{r.compiled_x_seqlab:.2f}x",
                 ratio(r.compiled_x_ct2), ratio(r.seqlab_x_ct2), f"{r.first_pass_s:.0f} s",
                 of(r.equal_compiled, r.sources), of(r.equal_ct2, r.sources)]
                for r in found]
        header = ["shape (random weights)", "decoding", "compiled tokens/s", "compiled vs eager",
                  "compiled vs CTranslate2 fp32", "eager vs CTranslate2 fp32", "compiled first pass (compiles)",
                  "compiled outputs equal eager's", "equal CTranslate2's"]
        what = (f"{found[0].sources if found else 0} random sources of {cfg['seq_len'] // 2}-{cfg['seq_len']} tokens "
                f"one a call, {cfg['max_new_tokens']} new tokens at most, fp32, best of {cfg['decode_repeats']}")
        parts.append(machine_heading(record, what) + "\n\n" + table(header, rows))
    return "\n\n".join(parts) or f"_No archived bench yet: `make pipeline NAME={archive.name}`._"


PIPELINE = Pipeline(
    "bench_one_source", "one source a call at the families' and causal LMs' shapes: the compiled step against the "
    "eager one and CTranslate2", (Stage("one_source", "bench", ("one_source=true",)),),
    (Table("bench_one_source", render, DOC),),
)
