"""The fused loss's CPU row blocks against the unfused loss, fp32, at output-layer shapes of the benches:
`python benchmarks/fused_loss_blocks.py [--rows 128] [--repeats 3]`.

128 rows of hidden states through the output layer and the label-smoothed loss, forward and backward, the
unfused path (`train.losses.label_smoothed_nll` on whole logits) against the fused one
(`train.output_loss`, `train.fused_loss=true`) with blocks of at least 1, 32, 64 and 128 rows (what
`output_loss.CPU_MIN_ROWS` sets), alternating, best of `--repeats`. mBART-large's 250k x 1024 output layer
frozen (as LoRA fine-tuning has it), the others trained. Prints the CPU's flags and other processes' load.
"""

from __future__ import annotations

import argparse
import json
from functools import partial

import torch
import torch.nn.functional as F

from ct2_bisect import cpu_report  # benchmarks/, beside this script
from seqlab import hardware
from seqlab.hardware import best_of, timed
from seqlab.train import output_loss
from seqlab.train.losses import label_smoothed_nll
from seqlab.train.output_loss import fused_label_smoothed_nll

SHAPES = {"mbart-large": (250_027, 1024, True), "opus-mt": (58_101, 512, False), "t5-small": (32_128, 512, False),
          "study": (8000, 256, False)}  # vocabulary, d, frozen


def step(h0: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, min_rows: int | None) -> None:
    h = h0.clone().requires_grad_(True)
    if min_rows is None:
        loss, _, _ = label_smoothed_nll(F.linear(h, weight), target, 0.1)
    else:
        output_loss.CPU_MIN_ROWS = min_rows
        loss, _, _ = fused_label_smoothed_nll(h, weight, None, target, 0.1)
    loss.backward()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    before = hardware.CpuClock.now()
    for shape, (vocab, d, frozen) in SHAPES.items():
        weight = (torch.randn(vocab, d) * 0.02).requires_grad_(not frozen)
        h0, target = torch.randn(args.rows, d), torch.randint(4, vocab, (args.rows,))
        runs = {"unfused": None, **{f"fused, {m} rows at least": m for m in (1, 32, 64, 128)}}
        best = best_of({k: partial(timed, partial(step, h0, weight, target, m)) for k, m in runs.items()},
                       args.repeats)
        print(json.dumps({"shape": shape, "frozen": frozen, "ms": {k: round(s * 1e3) for k, (_, s) in best.items()}}),
              flush=True)
    print(json.dumps(cpu_report(before)))


if __name__ == "__main__":
    main()
