"""What the paying rule measured, at the speculative bench's GPT-2 shape:
`python benchmarks/speculative_pacing.py [--batch 8] [--k 2] [--trials 3]`.

Builds the bench's random GPT-2-shaped model and 64 prompts (seqlab.bench.speculative), and in each trial, with
the process's measured costs cleared, decodes them `--batch` at a time with prompt lookup of k tokens under
`draft_positions=paying`; prints the first batch's calls (positions, milliseconds), the fit (a, b, c in ms: a
call of R positions takes a + b R, plus c where it verifies a proposal) after the first batch and after the
last, whether a new batch would propose (`Pacing.pays`), and how many proposing calls the trial made. Prints
the CPU's flags and other processes' load.
"""

from __future__ import annotations

import argparse

import torch

from ct2_bisect import cpu_report  # benchmarks/, beside this script
from seqlab import hardware
from seqlab.bench.speculative import random_gpt2
from seqlab.bench.speed import BenchConfig
from seqlab.decoding import DecodingConfig, generate
from seqlab.decoding.speculative import PACINGS


def milliseconds(fit: tuple[float, float, float] | None) -> list[float] | None:
    return None if fit is None else [round(v * 1e3, 2) for v in fit]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    cfg = BenchConfig()
    torch.set_num_threads(2)
    _, model, src, mask = random_gpt2(cfg, 64)
    decoding = DecodingConfig(max_length=cfg.max_new_tokens, suppress_special=False, draft="lookup",
                              draft_tokens=args.k)
    before = hardware.CpuClock.now()
    for trial in range(args.trials):
        PACINGS.clear()
        for i in range(0, src.shape[0], args.batch):
            generate(model, src[i:i + args.batch], mask[i:i + args.batch], decoding)
            pacing = PACINGS[model][(decoding.label, args.batch)]
            if i == 0:
                print(f"trial {trial}: first batch's calls", [(r, round(t * 1e3)) for _, r, t in pacing.calls[:8]],
                      "fit (ms)", milliseconds(pacing.fit(args.batch)))
        limits = torch.full((args.batch,), cfg.max_new_tokens)
        print(f"trial {trial}: after {src.shape[0] // args.batch} batches fit (ms)",
              milliseconds(pacing.fit(args.batch)), "a new batch proposes:", pacing.pays(limits, args.k),
              "proposing calls kept:", len(pacing.proposing))
    print(cpu_report(before))


if __name__ == "__main__":
    main()
