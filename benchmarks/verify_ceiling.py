"""The most a speculative call can gain over plain greedy search at a batch, from this CPU's products:
`python benchmarks/verify_ceiling.py [--batches 1,8,32,64] [--kept 0.85] [--engine onednn|seqlab]`.

Builds the speculative bench's random GPT-2-shaped model (seqlab.bench.speculative) and times, on the engine's
own weights, the products of one decoder call (every layer's projections and the output layer, each weight read
as a decoding call reads it) at each number of rows, and one plain greedy step's decoder call at each batch over
a cache of 30 prompt and 30 generated positions. A step's time less its products is what a call costs besides
them (attention, norms, the host's work). A call verifying n proposals a row computes batch x (1 + n) rows, and
keeps proposal j with chance kept^j (each after all before it kept): the ceiling is the best n's tokens a row
over its cost against a plain step, taking the call's other costs to be the plain step's (none of the
speculative call's own work: its packing, masks, the draft, the choice at each position). Prints the CPU's
flags and other processes' load, a 1,024^3 product's rate (the cores' arithmetic) and each row count's rate.
"""

from __future__ import annotations

import argparse

import torch

from ct2_bisect import cpu_report  # benchmarks/, beside this script
from seqlab import hardware
from seqlab.bench.speculative import random_gpt2
from seqlab.bench.speed import BenchConfig

REPEATS = 5  # each timing the fastest of these, after one warm-up call


def products_ms(linears: list[tuple[torch.nn.Module, int]], rows: int) -> float:
    """One call's products at `rows` rows: every linear layer (with its input width) once, in the model's order."""
    inputs = [(layer, torch.randn(rows, width)) for layer, width in linears]

    def run() -> None:
        for layer, x in inputs:
            layer(x)

    with torch.no_grad():
        return hardware.best_ms(run, REPEATS, warmup=1)


def step_ms(model: torch.nn.Module, src: torch.Tensor, mask: torch.Tensor, batch: int) -> float:
    """A plain greedy step's decoder call over `batch` prompts with 30 generated positions in the cache."""
    with torch.no_grad():
        cache = model.start_cache(model.encode(src[:batch], mask[:batch]), mask[:batch], capacity=64,
                                  src_ids=src[:batch])
        ids = torch.randint(4, 1000, (batch, 1))
        for _ in range(30):
            model.decode(ids, None, None, cache)
        length = cache.length

        def run() -> None:
            for layer in cache.layers:
                layer.length = length
            model.decode(ids, None, None, cache)

        return hardware.best_ms(run, REPEATS, warmup=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", default="1,8,32,64")
    parser.add_argument("--kept", type=float, default=0.85, help="the chance each proposal is kept")
    parser.add_argument("--engine", choices=("onednn", "seqlab"), default="onednn")
    parser.add_argument("--most", type=int, default=5, help="proposals a row at most")
    args = parser.parse_args()
    torch.set_num_threads(2)
    batches = [int(b) for b in args.batches.split(",")]
    _, model, src, mask = random_gpt2(BenchConfig(), max(batches))
    shapes = [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, torch.nn.Linear)]
    kind = torch.nn.Linear
    if args.engine == "onednn":
        from seqlab.model.onednn import PackedLinear, onednn_linears

        model, kind = onednn_linears(model), PackedLinear
    layers = [m for m in model.modules() if isinstance(m, kind)]
    linears = [(layer, width) for layer, (width, _) in zip(layers, shapes, strict=True)]
    before = hardware.CpuClock.now()
    peak = hardware.gemm_rate(torch.float32) / 1e9
    flops = 2 * sum(width * out for width, out in shapes)  # a row's, per call
    rows = sorted({b * (1 + n) for b in batches for n in range(args.most + 1)})
    cost = {r: products_ms(linears, r) for r in rows}
    steps = {b: step_ms(model, src, mask, b) for b in batches}
    print(cpu_report(before))
    print(f"engine {args.engine}; a 1,024^3 product: {peak:.0f} GFLOP/s")
    print("rows: products ms (GFLOP/s)  " + "  ".join(f"{r}: {cost[r]:.1f} ({flops * r / cost[r] / 1e6:.0f})"
                                                    for r in rows))
    for b in batches:
        other = steps[b] - cost[b]
        ceilings = []
        for n in range(args.most + 1):
            tokens = sum(args.kept**j for j in range(n + 1))
            ceilings.append(tokens / ((cost[b * (1 + n)] + other) / steps[b]))
        n = max(range(args.most + 1), key=ceilings.__getitem__)
        print(f"batch {b}: plain step {steps[b]:.1f} ms (products {cost[b]:.1f}, other {other:.1f}); ceiling "
              + ", ".join(f"n={i} {c:.2f}x" for i, c in enumerate(ceilings)) + f"; best n={n}: {ceilings[n]:.2f}x")


if __name__ == "__main__":
    main()
