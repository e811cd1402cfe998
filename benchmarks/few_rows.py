"""seqlab's default engine with and without the few-row products (`seqlab.model.products.FEW_ROWS`), alternately
in one process, at a families-bench shape: `python benchmarks/few_rows.py SHAPE BEAMS SOURCES_A_CALL SOURCES`,
e.g. `t5-small 5 1 8` (beam 5, one source a call, as `seqlab translate` reading stdin decodes).

A fifth argument starts the few-row range at that count instead (`1`: one-row products too, a greedy step of one
source). Prints the best of 3 rounds of each, their ratio, how many outputs are the same, the CPU's flags and other
processes' load.
"""

from __future__ import annotations

import json
import sys

from ct2_bisect import cpu_report, family_setup, trimmed_calls  # benchmarks/, beside this script
from seqlab import hardware
from seqlab.model import products


def main(shape: str, beams: int, per_call: int, sources: int, first: int | None = None) -> None:
    it = family_setup(shape, beams, sources)

    def run() -> tuple[list[list[int]], float]:
        return trimmed_calls(it.src, it.mask, per_call,
                             lambda s, m: it.families.timed_seqlab(it.model, s, m, it.decoding))

    few = products.FEW_ROWS
    sides = {"F.linear": range(0), "few rows": range(first if first is not None else few.start, few.stop)}
    best, outs = dict.fromkeys(sides, float("inf")), {}
    before = hardware.CpuClock.now()
    for _ in range(3):
        for name, rows in sides.items():
            products.FEW_ROWS = rows
            outs[name], seconds = run()
            best[name] = min(best[name], seconds)
    products.FEW_ROWS = few
    print(json.dumps({"shape": shape, "beams": beams, "sources_a_call": per_call, "sources": sources,
                      "seconds": {k: round(v, 3) for k, v in best.items()},
                      "speedup": round(best["F.linear"] / best["few rows"], 2),
                      "equal": sum(a == b for a, b in zip(outs["F.linear"], outs["few rows"], strict=True)),
                      **cpu_report(before)}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
         int(sys.argv[5]) if len(sys.argv) > 5 else None)
