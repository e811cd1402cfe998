"""The bench (`seqlab bench positions=true`): seqlab against Hugging Face MarianMTModel with identical
weights and batches, training in fp32 and bf16-mixed and decoding (greedy, beam 5, beam 8), with seqlab's
other engines (bf16 autocast, int8, oneDNN) and CTranslate2 beside them, and each position scheme against
sinusoidal positions. Its figures hold for one kind of CPU: the archive keeps one record per CPU model
(results/bench/bench-<cpu>.json), and the performance page renders one table per record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipelines.core import Pipeline, Stage, Table
from pipelines.tables import table

DOC = "docs/performance.md"
DECODINGS = (("greedy", "greedy"), ("beam", "beam 5"), ("beam8", "beam 8"))


def bench_records(archive: Path) -> list[dict[str, Any]]:
    return [r for p in sorted(archive.glob("bench-*.json")) if (r := json.loads(p.read_text())).get("status") == "ok"]


def rows_of(r: dict[str, Any]) -> list[list[str]]:
    """measure | seqlab | Hugging Face | seqlab / HF | outputs, from one bench result."""
    rows = []
    for tag in ("fp32", "bf16"):
        ours, theirs = r[f"train_{tag}"]["seqlab"], r[f"train_{tag}"]["hf"]
        rows.append([f"training, {tag}: tokens/s", f"{ours['tokens_per_s']:,.0f}", f"{theirs['tokens_per_s']:,.0f}",
                     f"{r[f'train_{tag}_ratio']:.2f}x", f"MFU {r[f'mfu_{tag}']:.1%} vs {r[f'mfu_{tag}_hf']:.1%}"])
        rows.append([f"training, {tag}: peak MiB", f"{ours['peak_mem_mb']:,.0f}", f"{theirs['peak_mem_mb']:,.0f}",
                     f"{theirs['peak_mem_mb'] / ours['peak_mem_mb']:.2f}x less", ""])
    for key, label in DECODINGS:
        if key not in r:
            continue
        d = r[key]
        rows.append([f"{label}: tokens/s", f"{d['seqlab_tokens_per_s']:,.0f}", f"{d['hf_tokens_per_s']:,.0f}",
                     f"{r[f'{key}_ratio']:.2f}x",
                     "identical to HF's" if d["identical"] else f"{d['differing_sources']} differ from HF's"])
        rows.append([f"{label}: peak MiB", f"{d['seqlab_peak_mem_mb']:,.0f}", f"{d['hf_peak_mem_mb']:,.0f}",
                     f"{d['hf_peak_mem_mb'] / max(d['seqlab_peak_mem_mb'], 1e-9):.2f}x less", ""])
        low = r[f"{key}_bf16"]
        rows.append([f"{label}, seqlab bf16 autocast", f"{low['tokens_per_s']:,.0f}", "",
                     f"{low['tokens_per_s'] / d['hf_tokens_per_s']:.2f}x",
                     f"{low['differing_from_fp32']} of {low['sources']} differ from fp32"])
        for variant, what, same in (("int8", "seqlab int8", "same_as_seqlab_fp32"),
                                    ("onednn", "`engine=seqlab_onednn`", "same_as_hf"),
                                    ("ct2_fp32", "CTranslate2 fp32", "same_as_seqlab_fp32"),
                                    ("ct2_int8", "CTranslate2 int8", "same_as_seqlab_fp32")):
            v = r.get(f"{key}_{variant}")
            if v is not None:
                ref = "HF's" if same == "same_as_hf" else "seqlab fp32's"
                rows.append([f"{label}, {what}", f"{v['tokens_per_s']:,.0f}", "", f"{v['x_hf']:.2f}x",
                             f"{v[same]} of {v['sources']} equal {ref}"])
    return rows


def positions_rows(r: dict[str, Any]) -> list[list[str]]:
    return [[scheme, f"{row['train_step_s'] * 1e3:.0f}", f"{row['train_x_sinusoidal']:.2f}x",
             f"{row['beam_s']:.2f}", f"{row['beam_x_sinusoidal']:.2f}x"]
            for scheme, row in (r.get("positions") or {}).items()]


def performance(archive: Path) -> str:
    found = bench_records(archive)
    if not found:
        return f"_No archived bench yet: `make pipeline NAME={archive.name}`._"
    parts = []
    for record in found:
        r, man = record["result"], record["manifest"]
        parts.append(f"**{man['cpu']}** ({', '.join(man['cpu_flags']) or 'no bf16/AMX flags'}; {r['threads']} "
                     f"threads; torch {man['torch']}; commit {(man['commit'] or '?')[:10]}"
                     f"{'' if man['clean'] else ' (dirty)'}; {man['date'][:10]})\n\n"
                     + table(["measure", "seqlab", "Hugging Face", "vs HF", "outputs"], rows_of(r)))
        if r.get("positions"):
            parts.append(table(["positions", "bf16 training step, ms", "speed vs sinusoidal", "beam 5 decoding, s",
                                "speed vs sinusoidal"], positions_rows(r)))
    return "\n\n".join(parts)


PIPELINE = Pipeline(
    "bench", "speed and memory against Hugging Face, CTranslate2 and seqlab's engines; position schemes",
    (Stage("bench", "bench", ("positions=true",)),),
    (Table("bench", performance, DOC),),
)
