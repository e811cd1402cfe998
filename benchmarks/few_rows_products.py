"""F.linear's fp32 product against (W x^T)^T, `seqlab.model.products.linear` with its range widened to every
count measured, at the families' and the language models' layer shapes and 1 to 256 rows:
`python benchmarks/few_rows_products.py [--rows 2,16,...]`.

Prints, per weight shape (in x out), F.linear's best time over (W x^T)^T's at each number of rows (> 1: the
weight on the left is faster), so that `products.FEW_ROWS` can be read off on the CPU at hand; then the CPU's
flags and other processes' load.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

from ct2_bisect import cpu_report  # benchmarks/, beside this script
from seqlab import hardware
from seqlab.hardware import best_ms
from seqlab.model import products

# (in, out): t5-small's and opus-mt's feed-forward and output layers, bart-base's and GPT-2's, SmolLM-135M's,
# mBART-large's feed-forward
SHAPES = ((512, 2048), (2048, 512), (512, 32128), (512, 58101), (768, 2304), (768, 3072), (3072, 768),
          (768, 50257), (576, 1536), (1536, 576), (576, 49152), (1024, 4096))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", default="1,2,8,16,24,32,48,64,96,128,192,256")
    args = parser.parse_args()
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    before = hardware.CpuClock.now()
    rows = [int(m) for m in args.rows.split(",")]
    products.FEW_ROWS = range(min(rows), max(rows) + 1)  # products.linear takes every count measured weight-left
    with torch.no_grad():
        for k, n in SHAPES:
            weight, ratios = torch.randn(n, k, generator=g), {}
            for m in rows:
                x = torch.randn(m, k, generator=g)
                left = best_ms(lambda x=x, w=weight: products.linear(x, w, None), 5, warmup=1)
                ratios[m] = round(best_ms(lambda x=x, w=weight: F.linear(x, w), 5, warmup=1) / left, 2)
            print(json.dumps({"in": k, "out": n, "f_linear_over_w_left": ratios}), flush=True)
    print(json.dumps(cpu_report(before)))


if __name__ == "__main__":
    main()
