"""A greedy step's products for one source a call, the ways a CPU can take a one-row product:
`python benchmarks/one_row_step.py [--shape t5-small] [--repeats 20]`.

Builds the decoder's linear layers of a families-bench shape (every layer its own weights, so that the step reads
them from memory as decoding does, not from cache) and times one row through all of them and the output layer:
F.linear (MKL's matrix-vector product), `products.linear` (the default engine's: the row beside a zero row,
taken weight-left as (W X^T)^T, MKL's matrix product), and oneDNN's packed weights. Prints each way's best milliseconds
per step, the GB/s its weights were read at, and the largest difference from F.linear's outputs; then the CPU's
flags and other processes' load.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from torch import nn

from ct2_bisect import cpu_report  # benchmarks/, beside this script
from seqlab import hardware
from seqlab.hardware import best_ms
from seqlab.model import products
from seqlab.model.onednn import PackedLinear, onednn_available

# shape -> (d_model, d_ff, vocabulary, decoder layers): the families bench's
SHAPES = {"t5-small": (512, 2048, 32128, 6), "bart-base": (768, 3072, 50265, 6), "opus-mt": (512, 2048, 58101, 6)}


def layer_shapes(d: int, ff: int, vocab: int, layers: int) -> list[tuple[int, int]]:
    """(in, out) of a decoder step's products: per layer the fused self-attention projection, its output, the
    cross-attention query and output, the feed-forward pair; then the output layer."""
    per_layer = [(d, 3 * d), (d, d), (d, d), (d, d), (d, ff), (ff, d)]
    return per_layer * layers + [(d, vocab)]


def layer(weight: torch.Tensor) -> nn.Linear:
    """An nn.Linear without bias holding `weight` (out, in)."""
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    linear.weight.data = weight
    return linear


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shape", default="t5-small", choices=sorted(SHAPES))
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    before = hardware.CpuClock.now()
    shapes = layer_shapes(*SHAPES[args.shape])
    weights = [torch.randn(n, k, generator=g) / k**0.5 for k, n in shapes]
    inputs = [torch.randn(1, k, generator=g) for k, _ in shapes]
    ways = {"f_linear": lambda i: F.linear(inputs[i], weights[i]),
            "padded_weight_left": lambda i: products.linear(inputs[i], weights[i], None)}
    if onednn_available():
        packed = [PackedLinear(layer(w)) for w in weights]
        ways["onednn_packed"] = lambda i: packed[i](inputs[i])
    megabytes = sum(w.numel() for w in weights) * 4 / 1e6
    with torch.no_grad():
        reference = [ways["f_linear"](i) for i in range(len(shapes))]
        for name, way in ways.items():
            ms = best_ms(lambda way=way: [way(i) for i in range(len(shapes))], args.repeats, warmup=2)
            diff = max(float((way(i) - reference[i]).abs().max()) for i in range(len(shapes)))
            print(json.dumps({"shape": args.shape, "way": name, "ms_per_step": round(ms, 3),
                              "gb_per_s": round(megabytes / ms, 1), "max_abs_diff": diff}), flush=True)
    print(json.dumps(cpu_report(before)))


if __name__ == "__main__":
    main()
