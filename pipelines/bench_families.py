"""Decoding at the pretrained families' real shapes (`seqlab bench families=true`): t5-small, bart-base and an
opus-mt model with random weights, seqlab against Hugging Face `generate` and CTranslate2 fp32 on the same
sources, greedy and beam 5, outputs compared. One record per CPU model
(results/bench_families/families-<cpu>.json), one table per record on the performance page."""

from __future__ import annotations

from pathlib import Path

from pipelines.bench import bench_records, side_heading
from pipelines.tables import of, ratio, table
from seqlab.bench.families import from_dict
from seqlab.pipeline.core import Pipeline, Stage, Table

DOC = "docs/performance.md"


def render(archive: Path) -> str:
    parts = []
    for record in bench_records(archive, "families-*.json"):
        found = from_dict(record["result"]["families"])
        rows = [[r.shape, f"{r.decoding}, one source a call" if r.one_at_a_time else r.decoding,
                 f"{r.tokens / r.seqlab_s:,.0f}", f"{r.x_hf:.2f}x",
                 ratio(r.x_ct2), of(r.equal_hf, r.sources), of(r.equal_ct2, r.sources)]
                for r in found]
        header = ["shape (random weights)", "decoding", "seqlab tokens/s", "vs generate", "vs CTranslate2 fp32",
                  "outputs equal generate's", "equal CTranslate2's"]
        if any(r.onednn_s is not None for r in found):  # the oneDNN engine, where the record timed it
            for row, r in zip(rows, found, strict=True):
                row += [ratio(r.onednn_x_ct2), of(r.equal_onednn, r.sources)]
            header += ["oneDNN engine vs CTranslate2 fp32", "its outputs equal generate's"]
        parts.append(side_heading(record) + "\n\n" + table(header, rows) + auto_line(record["result"]))
    return "\n\n".join(parts) or f"_No archived bench yet: `make pipeline NAME={archive.name}`._"


def auto_line(result: dict) -> str:
    """What `engine=auto` takes on the record's CPU, where the record asked it (records from 2026-12-06 on)."""
    auto = result.get("engine_auto")
    if not auto:
        return ""
    said = "; ".join(f"{where}: `{choice['engine']}` ({choice['reason'].split(' (')[0]})"
                     for where, choice in auto.items())
    return f"\n\n`engine=auto` on this CPU takes, {said}."


PIPELINE = Pipeline(
    "bench_families", "decoding speed at t5-small's, bart-base's and opus-mt's shapes against generate and "
    "CTranslate2", (Stage("families", "bench", ("families=true",)),),
    (Table("bench_families", render, DOC), Table("bench_families_pretrained", render, "docs/pretrained.md")),
)
