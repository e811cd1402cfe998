"""Where a LoRA training step's time goes, seqlab against Hugging Face + peft at a fine-tuning bench shape:
`python benchmarks/lora_profile.py [--shape mbart-large] [--layers 6] [--mode lora] [--steps 3]`.

Builds both models as `seqlab bench finetune=true` does (seqlab.bench.finetune; `--layers` cuts both stacks
to that depth so a profile takes a minute), times their steps alternately (best of `--steps`, after a warm-up
step each), then prints torch.profiler's operator summary of one step of each side, the matrix products apart.
Prints the CPU's flags and other processes' load.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch.profiler import ProfilerActivity, profile

from ct2_bisect import cpu_report  # benchmarks/, beside this script
from seqlab import hardware
from seqlab.bench.finetune import SHAPES, batches, hf_model, seqlab_model
from seqlab.bench.speed import BenchConfig, bench_optimizer, hf_train_step, seqlab_train_step
from seqlab.memory import keep_freed_memory

PRODUCTS = ("aten::addmm", "aten::mm", "aten::bmm", "aten::_mkl_linear", "aten::baddbmm")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shape", default="mbart-large", choices=sorted(SHAPES))
    parser.add_argument("--layers", type=int, default=6, help="encoder and decoder layers (0: the shape's own)")
    parser.add_argument("--mode", default="lora", choices=("full", "lora", "lora + checkpointing"))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rows", type=int, default=20, help="operators shown")
    args = parser.parse_args()

    kind, values, targets = SHAPES[args.shape]
    if args.layers:
        depth = ("num_layers", "num_decoder_layers") if kind == "t5" else ("encoder_layers", "decoder_layers")
        values = {**values, **dict.fromkeys(depth, args.layers)}
    cfg = BenchConfig(batch=4, seq_len=32)
    data = batches(cfg, values["vocab_size"], args.steps + 1)
    sides = {"seqlab": seqlab_model(kind, values, args.mode), "hf": hf_model(kind, values, args.mode, targets)}
    steps = {side: (seqlab_train_step(m, 0.1) if side == "seqlab" else hf_train_step(m, 0.1), bench_optimizer(m))
             for side, m in sides.items()}

    def one(side: str, b) -> float:
        step, opt = steps[side]
        start = time.perf_counter()
        step(b).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    for side in sides:
        sides[side].train()
        one(side, data[0])  # warm-up
    before = hardware.CpuClock.now()
    best = {side: float("inf") for side in sides}
    for b in data[1:]:
        for side in sides:
            best[side] = min(best[side], one(side, b))
    print(json.dumps({"shape": args.shape, "layers": args.layers, "mode": args.mode, **cpu_report(before),
                      "step_s": {k: round(v, 3) for k, v in best.items()},
                      "seqlab_vs_hf": round(best["hf"] / best["seqlab"], 3)}))
    for side in sides:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            one(side, data[1])
        averages = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in averages)
        products = sum(e.self_cpu_time_total for e in averages if e.key in PRODUCTS)
        print(f"\n== {side}: {total / 1e3:.0f} ms self CPU, products {100 * products / total:.1f}%")
        print(averages.table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    torch.manual_seed(0)
    keep_freed_memory()  # as `seqlab bench` runs: freed blocks kept, not unmapped and faulted in again
    main()
