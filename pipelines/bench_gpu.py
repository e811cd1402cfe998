"""The bench on a GPU (`make pipeline NAME=bench_gpu` on a CUDA machine): seqlab against Hugging Face at the
bench's default shape and at `bench=base` (the Transformer-base shape, whose training MFU is the one to
read), each with torch.profiler's tables of a bf16 training step and a beam search, which say where the
time goes when a goal is missed; and each position scheme against sinusoidal positions at the default shape
(ALiBi's and T5's biases are a float mask, which rules out the flash kernel). One record per GPU model
(results/bench_gpu/<stage>-<gpu>.json); and the training levers at Transformer-base (`levers`: the fused loss, its
compiled arithmetic and the compiled layers against the plain step and HF), at 12k tokens a step and at a user's
32k; Transformer-base also at 32k and 64k tokens a step (`base_32k`, `base_64k`), where neither toolkit is
host-bound."""

from __future__ import annotations

import re
from pathlib import Path

from pipelines.bench import bench_records, measures, positions_table
from pipelines.bench_levers import heading, levers_table
from pipelines.tables import commit_of, table
from seqlab.bench.result import BenchResult
from seqlab.pipeline.core import Pipeline, Stage, Table

DOC = "docs/performance.md"
SHAPES = {"default": "the bench's default shape (d = 256, 3+3 layers, batches of 64 x 40 tokens)",
          "positions": "the bench's default shape, each position scheme against sinusoidal positions",
          "base": "`bench=base`: Transformer-base (d = 512, 6+6 layers, 37k vocabulary, batches of 192 x 64 tokens)",
          **{f"base_{k}k": f"`bench=base` at a user's batch: {n} x 64 = {k}k tokens per step" for k, n in
             (("32", 512), ("64", 1024))}}
# Transformer-base at the batches an H200 user trains with (fairseq's WMT recipe: ~460k tokens an update over
# 8 GPUs x update-freq 16), where the host's Python and launches no longer hide the GPU's work; levers at 32k
USER_BATCHES = {"32": 512, "64": 1024}
PROFILED = {"train_bf16_seqlab": "seqlab's bf16 training step", "train_bf16_hf": "HF's bf16 training step",
            "beam5_bf16_seqlab": "seqlab's bf16 beam search (beam 5)"}
TOP = 5


def profile_summary(text: str) -> tuple[float, float, list[tuple[str, float]]]:
    """(host ms, device ms, the TOP operators by device self time with their share in %) from a
    torch.profiler table (`seqlab.bench.speed.profile_table`); a CPU's table has no device: nan, and the
    operators by host time."""
    host = total_ms(text, "CPU")
    device = total_ms(text, "CUDA") if "Self CUDA time total" in text else float("nan")
    header = next(line for line in text.splitlines() if line.strip().startswith("Name"))
    columns = re.split(r"\s{2,}", header.strip())
    share = columns.index("Self CUDA %" if "Self CUDA %" in columns else "Self CPU %")  # a CPU's profile
    ops = []
    for line in text.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == len(columns) and cells[share].endswith("%") and not line.strip().startswith("Name"):
            ops.append((kernel_name(cells[0]), float(cells[share].rstrip("%"))))
    return host, device, ops[:TOP]


UNIT_MS = {"s": 1e3, "ms": 1.0, "us": 1e-3}


def total_ms(text: str, what: str) -> float:
    """A profiler table's `Self <what> time total` in ms (the profiler writes it in s, ms or us)."""
    value, unit = re.search(rf"Self {what} time total: ([\d.]+)(s|ms|us)\b", text).groups()
    return float(value) * UNIT_MS[unit]


def kernel_name(name: str) -> str:
    """An operator's or kernel's name without its return type and template arguments (which the profiler
    cuts off): `void at::native::reduce_kernel<128, 4, ...` -> `at::native::reduce_kernel`."""
    return name.removeprefix("void ").split("<")[0].removesuffix("...")


def performance(archive: Path) -> str:
    found = [r for r in bench_records(archive, "*.json") if "levers" not in r["result"]]
    if not found:
        return f"_No archived GPU bench yet: `make pipeline NAME={archive.name}` on a CUDA machine._"
    parts = []
    for record in found:
        r, man = BenchResult.from_dict(record["result"]), record["manifest"]
        parts.append(f"**{r.device}, {SHAPES.get(record['stage'], record['stage'])}** (host {man['cpu']}; torch "
                     f"{man['torch']}; commit {commit_of(man)}; {man['date'][:10]}; decoding "
                     f"{r.config['decode_sources']} random sources of up to {r.config['seq_len']} tokens, "
                     f"{r.config['max_new_tokens']} new at most)\n\n"
                     + measures(r))
        if r.positions:
            parts.append(positions_table(r))
        if r.profiles:
            parts.append("Where the time goes (torch.profiler over 5 training steps or 2 searches; host: the Python "
                         "and launch time of every operator, GPU: its kernels' time):\n\n" + profiles_table(r.profiles))
    for record in bench_records(archive, "levers*.json"):
        tokens = record["result"]["config"]["batch"] * record["result"]["config"]["seq_len"]
        parts.append(f"Each training lever alone and together (`seqlab bench levers=true`, bf16-mixed, {tokens:,} "
                     "tokens a step), "
                     + heading(record) + "\n\n" + levers_table(record))
        if profiled := record["result"].get("profiles"):
            parts.append("Where each variant's time goes (torch.profiler over 5 steps):\n\n" + profiles_table(profiled))
    return "\n\n".join(parts)


def profiles_table(profiles: dict[str, str]) -> str:
    """what | host ms | GPU ms | the largest GPU operators, one row per profiled step."""
    rows = []
    for name, text in profiles.items():
        host, device, ops = profile_summary(text)
        rows.append([PROFILED.get(name, name.replace("_", " ")), f"{host:,.0f}", f"{device:,.0f}",
                     "; ".join(f"{op} {pct:.0f}%" for op, pct in ops)])
    return table(["what", "host ms", "GPU ms", "largest GPU operators (share of GPU time)"], rows)


PIPELINE = Pipeline(
    "bench_gpu", "speed against Hugging Face on a GPU, at the default shape and Transformer-base, profiled",
    (Stage("default", "bench", ("bench.device=cuda", "profile=true")),
     Stage("base", "bench", ("bench=base", "bench.device=cuda", "profile=true")),
     Stage("positions", "bench", ("bench.device=cuda", "positions=true")),
     Stage("levers", "bench", ("bench=base", "bench.device=cuda", "levers=true", "profile=true")),
     *(Stage(f"base_{k}k", "bench", ("bench=base", "bench.device=cuda", f"bench.batch={n}", "profile=true"))
       for k, n in USER_BATCHES.items()),
     Stage("levers_32k", "bench", ("bench=base", "bench.device=cuda", "bench.batch=512", "levers=true"))),
    (Table("bench_gpu", performance, DOC),),
)
