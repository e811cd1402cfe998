"""Whether CTranslate2 and PyTorch slow each other in one process: `python benchmarks/ct2_process.py [--shape
t5-small] [--beams 1] [--sources 16]`.

One source a call at a families-bench shape (its random model and sources, 2 threads), in this order: seqlab's
greedy (or beam) search twice before CTranslate2 has run in the process; CTranslate2 in a process of its own
(`engines.own_process`) twice; CTranslate2 in this process twice; seqlab twice more. Prints each run's seconds,
the share of the run each of this process's threads was busy (/proc), then the CPU's flags and other load.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from ct2_bisect import cpu_report, family_setup, trimmed_calls  # benchmarks/, beside this script
from seqlab import hardware
from seqlab.engines.ct2 import CT2Engine


def busy_ticks() -> dict[str, int]:
    """Each thread of this process: its CPU ticks so far (user + system)."""
    ticks = {}
    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
        with open(f"/proc/{os.getpid()}/task/{tid}/stat") as stat:
            fields = stat.read().split(")")[1].split()
        ticks[tid] = int(fields[11]) + int(fields[12])
    return ticks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shape", default="t5-small")
    parser.add_argument("--beams", type=int, default=1)
    parser.add_argument("--sources", type=int, default=16)
    args = parser.parse_args()
    before = hardware.CpuClock.now()
    it = family_setup(args.shape, args.beams, args.sources)
    fam, model = it.families, it.model
    apart, here = CT2Engine(it.engine.path, model, None, own_process=True), CT2Engine(it.engine.path, model, None)
    runs = {"seqlab": lambda s, m: fam.timed_seqlab(model, s, m, it.decoding),
            "ctranslate2 in its own process": lambda s, m: fam.timed_ct2(apart, s, m, it.decoding),
            "ctranslate2 in this process": lambda s, m: fam.timed_ct2(here, s, m, it.decoding)}
    fam.timed_seqlab(model, it.src[:1], it.mask[:1], it.decoding)  # warm-up
    hz = os.sysconf("SC_CLK_TCK")
    for name in ("seqlab", "ctranslate2 in its own process", "ctranslate2 in this process", "seqlab"):
        for _ in range(2):
            ticks, start = busy_ticks(), time.perf_counter()
            _, seconds = trimmed_calls(it.src, it.mask, 1, runs[name])
            wall, after = time.perf_counter() - start, busy_ticks()
            busy = sorted((after[t] - ticks.get(t, 0)) / hz / wall for t in after)[::-1]
            print(json.dumps({"run": name, "seconds": round(seconds, 2),
                              "threads_busy": [round(b, 2) for b in busy if b > 0.01]}), flush=True)
    print(json.dumps({"shape": args.shape, "beams": args.beams, "sources": args.sources,
                      "threads": torch.get_num_threads(), **cpu_report(before)}))


if __name__ == "__main__":
    main()
