"""The bench (`seqlab bench positions=true`) on the reference translation model, decoding its test
sentences: seqlab against Hugging Face MarianMTModel with identical weights and batches, training in fp32
and bf16-mixed and decoding (greedy, beam 5, beam 8), with seqlab's other engines (bf16 autocast, int8,
oneDNN) and CTranslate2 beside them, and each position scheme against sinusoidal positions. Its figures
hold for one kind of CPU: the archive keeps one record per CPU model, a CPU without AVX512 apart
(results/bench/bench-<cpu>.json; seqlab.app.runner.machine_model), and
the performance page renders one table per record."""

from __future__ import annotations

import json
from pathlib import Path

from pipelines.core import trained_then_decoded
from pipelines.tables import commit_of, table
from seqlab.bench.result import ENGINES, BenchResult
from seqlab.hardware import bf16_flags
from seqlab.pipeline.core import Pipeline, Stage, Table

DOC = "docs/performance.md"
LABELS = {"greedy": "greedy", "beam": "beam 5", "beam8": "beam 8"}
ENGINE_NAMES = {"bf16": "seqlab bf16 autocast", "int8": "seqlab int8", "onednn": "`engine=seqlab_onednn`",
                "ct2_fp32": "CTranslate2 fp32", "ct2_int8": "CTranslate2 int8",
                "graphs": "`engine=seqlab_graphs` (CUDA graphs)", "graphs_bf16": "`engine=seqlab_graphs` bf16"}


def bench_records(archive: Path, pattern: str = "bench-*.json") -> list[dict]:
    """The archive's finished bench records, one per machine kind."""
    return [r for p in sorted(archive.glob(pattern)) if (r := json.loads(p.read_text())).get("status") == "ok"]


def machine_heading(record: dict, what: str) -> str:
    """The line above a side bench's table: the CPU, its flags, threads, torch, the commit, the date, other
    processes' load, then `what` was timed."""
    result, man = record["result"], record["manifest"]
    return (f"**{man['cpu']}** ({', '.join(man['cpu_flags']) or 'no bf16/AMX flags'}; {result['threads']} threads; "
            f"torch {man['torch']}; commit {commit_of(man)}; {man['date'][:10]}; other processes' load "
            f"{result['others_busy_cores']:.2f} cores; {what})")


def side_heading(record: dict, shape: str = "") -> str:
    """The line above a decoding side bench's table (families, features): `machine_heading` with the decoding
    shape (`shape`: the model's, where the bench's own)."""
    cfg = record["result"]["config"]
    return machine_heading(record, f"{cfg['decode_sources']} random sources of {cfg['seq_len'] // 2}-{cfg['seq_len']} "
                                   f"tokens, {cfg['max_new_tokens']} new tokens at most, fp32, best of "
                                   f"{cfg['decode_repeats']}{shape}")


def rows_of(r: BenchResult) -> list[list[str]]:
    """measure | seqlab | Hugging Face | vs HF | outputs, from one bench result."""
    rows = []
    for tag, t in r.train.items():
        rows.append([f"training, {tag}: tokens/s", f"{t.seqlab.tokens_per_s:,.0f}", f"{t.hf.tokens_per_s:,.0f}",
                     f"{t.ratio:.2f}x", f"MFU {t.mfu(t.seqlab):.1%} vs {t.mfu(t.hf):.1%}"])
        rows.append([f"training, {tag}: peak MiB", f"{t.seqlab.peak_mem_mb:,.0f}", f"{t.hf.peak_mem_mb:,.0f}",
                     f"{t.hf.peak_mem_mb / t.seqlab.peak_mem_mb:.2f}x less", ""])
        if t.seqlab_sdpa is not None:
            rows.append([f"training, {tag}, fused SDPA throughout", f"{t.seqlab_sdpa.tokens_per_s:,.0f}", "",
                         f"{t.seqlab_sdpa.tokens_per_s / t.hf.tokens_per_s:.2f}x", ""])
    for key, d in r.decode.items():
        label = LABELS.get(key, key)
        rows.append([f"{label}: tokens/s", f"{d.generated_tokens / d.seqlab_s:,.0f}",
                     f"{d.generated_tokens / d.hf_s:,.0f}", f"{d.ratio:.2f}x",
                     f"{d.sources - d.differing_sources} of {d.sources} equal HF's"])
        rows.append([f"{label}: peak MiB", f"{d.seqlab_peak_mem_mb:,.0f}", f"{d.hf_peak_mem_mb:,.0f}",
                     f"{d.hf_peak_mem_mb / max(d.seqlab_peak_mem_mb, 1e-9):.2f}x less", ""])
        for engine, e in d.engines.items():
            rows.append([f"{label}, {ENGINE_NAMES.get(engine, engine)}", f"{e.tokens_per_s:,.0f}", "",
                         f"{d.x_hf(engine):.2f}x", f"{e.same} of {e.sources} equal {ENGINES[engine]}'s"])
    return rows


def measures(r: BenchResult) -> str:
    """One bench result's table against Hugging Face (rows_of), on a CPU or a GPU alike."""
    return table(["measure", "seqlab", "Hugging Face", "vs HF", "outputs"], rows_of(r))


def positions_table(r: BenchResult) -> str:
    """Each position scheme against sinusoidal positions timed in the same run."""
    rows = [[scheme, f"{p.train_step_s * 1e3:.0f}", f"{p.train_x_sinusoidal:.2f}x", f"{p.beam_tokens / p.beam_s:,.0f}",
             f"{p.beam_x_sinusoidal:.2f}x"] for scheme, p in r.positions.items()]
    return table(["positions", "bf16 training step, ms", "speed vs sinusoidal", "beam 5 decoding, tokens/s",
                  "speed vs sinusoidal"], rows)


def performance(archive: Path) -> str:
    found = bench_records(archive)
    if not found:
        return f"_No archived bench yet: `make pipeline NAME={archive.name}`._"
    parts = []
    for record in found:
        r, man = BenchResult.from_dict(record["result"]), record["manifest"]
        parts.append(f"**{man['cpu']}** ({', '.join(man['cpu_flags']) or 'no bf16/AMX flags'}; {r.threads} "
                     f"threads; torch {man['torch']}; commit {commit_of(man)}; {man['date'][:10]}; "
                     + (f"other processes' load {r.others_busy_cores:.2f} cores; " if r.others_busy_cores is not None
                        else "")
                     + "decoding "
                     + (f"{r.config['decode_sources']} test sentences of the reference model)\n\n" if r.ckpt else
                        f"{r.config['decode_sources']} random sources of an untrained model of the same shape)\n\n")
                     + measures(r)
                     + (f"\n\n`engine=auto` decodes with `{r.engine_auto}` here: {r.engine_auto_reason}."
                        if r.engine_auto else ""))
        if r.positions:
            parts.append(positions_table(r))
    return "\n\n".join(parts)


def headline(archive: Path) -> str:
    """The README's speed summary: per CPU, training and beam-5 decoding against Hugging Face (and
    CTranslate2), with the engine `engine=auto` takes there."""
    rows = []
    for record in bench_records(archive):
        r = BenchResult.from_dict(record["result"])
        beam = r.decode.get("beam")
        auto = beam.engines.get("onednn") if beam and r.engine_auto == "seqlab_onednn" else None
        auto_s = auto.seconds if auto else (beam.seqlab_s if beam else None)
        ct2 = beam.engines.get("ct2_fp32") if beam else None
        rows.append([record["manifest"]["cpu"] + " (" + ", ".join(bf16_flags(record["manifest"]["cpu_flags"])) + ")",
                     f"{r.train['fp32'].ratio:.2f}x", f"{r.train['bf16'].ratio:.2f}x",
                     f"{beam.hf_s / auto_s:.2f}x" if beam and auto_s else "–",
                     f"{ct2.seconds / auto_s:.2f}x" if ct2 and auto_s else "–",
                     "–" if beam is None else f"{auto.same if auto else beam.sources - beam.differing_sources} of "
                                              f"{beam.sources}"])
    if not rows:
        return f"_No archived bench yet: `make pipeline NAME={archive.name}`._"
    return table(["CPU", "training fp32 vs HF", "training bf16 vs HF", "beam 5 (engine=auto) vs HF",
                  "vs CTranslate2 fp32", "beam 5 outputs equal HF's"], rows)


PIPELINE = Pipeline(
    "bench", "speed and memory against Hugging Face, CTranslate2 and seqlab's engines; position schemes",
    (*trained_then_decoded("mt_bible_small", {}), Stage("bench", "bench", ("positions=true",), after="train")),
    (Table("bench", performance, DOC), Table("readme_bench", headline, "README.md")),
)
