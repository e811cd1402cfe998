"""The int8 bench at the shapes named, alone: `python benchmarks/int8_shape.py SHAPE[,SHAPE...]`, e.g.
`t5-small` (seqlab.bench.int8: seqlab's int8 engine, eager and compiled, against CTranslate2 int8, greedy and
beam 5, the bench's 64 random sources in one call and the first 16 one a call, best of 3 after a warm-up).

For a row of the archived record that looks out of line: the same decoding in a process of its own, on the
machine at hand. Prints each row's seconds and ratio, the CPU's flags and other processes' load. Runs under the
allocator the commands set (seqlab.memory), as `seqlab bench` does.
"""

from __future__ import annotations

import json
import sys

from ct2_bisect import cpu_report  # benchmarks/, beside this script
from seqlab import hardware
from seqlab.bench.int8 import int8_bench
from seqlab.bench.speed import BenchConfig
from seqlab.memory import keep_freed_memory


def main(shapes: tuple[str, ...]) -> None:
    keep_freed_memory()
    before = hardware.CpuClock.now()
    rows = [{"shape": r.shape, "decoding": r.decoding, "one a call": r.one_at_a_time, "seqlab_s": round(r.seqlab_s, 2),
             "ct2_s": None if r.ct2_s is None else round(r.ct2_s, 2),
             "x_ct2": None if r.x_ct2 is None else round(r.x_ct2, 2), "compiled_s": round(r.compiled_s, 2),
             "compiled_x_ct2": None if r.compiled_x_ct2 is None else round(r.compiled_x_ct2, 2),
             "equal_fp32": r.equal_fp32, "compiled_equal_fp32": r.compiled_equal_fp32}
            for r in int8_bench(BenchConfig(), shapes=shapes)]
    print(json.dumps({"rows": rows, **cpu_report(before)}, indent=1))


if __name__ == "__main__":
    main(tuple(sys.argv[1].split(",")))
