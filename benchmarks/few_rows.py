"""seqlab's default engine with and without the few-row products (`seqlab.model.products.FEW_ROWS`), alternately
in one process, at a families-bench shape: `python benchmarks/few_rows.py SHAPE BEAMS SOURCES_A_CALL SOURCES`,
e.g. `t5-small 5 1 8` (beam 5, one source a call, as `seqlab translate` reading stdin decodes).

Prints the best of 3 rounds of each, their ratio, how many outputs are the same, the CPU's flags and other
processes' load.
"""

from __future__ import annotations

import json
import sys

from ct2_bisect import family_setup  # benchmarks/, beside this script
from seqlab import hardware
from seqlab.model import products


def main(shape: str, beams: int, per_call: int, sources: int) -> None:
    it = family_setup(shape, beams, sources)
    batches = [(it.src[i:i + per_call], it.mask[i:i + per_call]) for i in range(0, sources, per_call)]

    def run() -> tuple[list[list[int]], float]:  # every call trimmed of its padding columns, as a caller would
        outs, seconds = [], 0.0
        for s, m in batches:
            width = int((~m).sum(1).max())
            out, t = it.families.timed_seqlab(it.model, s[:, :width], m[:, :width], it.decoding)
            outs, seconds = outs + out, seconds + t
        return outs, seconds

    few = products.FEW_ROWS
    sides = {"F.linear": range(0), "few rows": few}
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
                      "cpu": hardware.cpu_model(),
                      "flags": sorted(f for f in hardware.cpu_flags() if f.startswith(("avx", "amx"))),
                      "others_busy_cores": round(before.others_busy_cores(hardware.CpuClock.now()), 2)}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
