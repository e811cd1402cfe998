"""A decoding with glibc's default allocator and with the one seqlab's commands set (seqlab.memory.keep_freed_memory:
large freed blocks kept for the next step, not unmapped and faulted in again), each in a fresh process, in turn:
`python benchmarks/allocator.py SHAPE BEAMS SIDE PRECISION`, SHAPE one of the families' or causal LMs' bench shapes,
SIDE `seqlab` or `ct2` (CTranslate2 in its own process, which takes the setting from the same switch,
SEQLAB_KEEP_FREED_MEMORY), PRECISION `fp32` or `int8`; e.g. `gpt2 5 ct2 int8`.

Each process decodes the bench's 64 random sources once to warm up, then twice; prints the best seconds of each
setting over 2 rounds, their ratio, the CPU's flags and other processes' load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

from ct2_bisect import cpu_report  # benchmarks/, beside this script


def once(shape: str, beams: int, side: str, precision: str) -> float:
    """This process's best of 2 decodings after a warm-up, under whatever SEQLAB_KEEP_FREED_MEMORY says."""
    import torch

    from seqlab.bench.families import search, timed_ct2, timed_seqlab
    from seqlab.bench.one_source import model_and_sources
    from seqlab.bench.speed import BenchConfig
    from seqlab.engines.ct2 import CT2Engine
    from seqlab.interop.ct2 import export_ctranslate2
    from seqlab.memory import keep_freed_memory
    from seqlab.model.quantize import dynamic_int8

    keep_freed_memory()
    torch.set_num_threads(2)
    cfg = BenchConfig()
    model, src, mask = model_and_sources(shape, cfg)
    if side == "seqlab":
        run = partial(timed_seqlab, dynamic_int8(model) if precision == "int8" else model, src, mask,
                      search(beams, cfg))
    else:
        path = export_ctranslate2(model, None, Path(tempfile.mkdtemp(prefix="seqlab-ct2-")) / "model")
        engine = CT2Engine(path, model, None, compute_type="int8" if precision == "int8" else "float32",
                           own_process=True)
        run = partial(timed_ct2, engine, src, mask, search(beams, cfg))
    run()
    return min(run()[1] for _ in range(2))


def main(shape: str, beams: int, side: str, precision: str) -> None:
    from seqlab import hardware

    before = hardware.CpuClock.now()
    best = {"default": float("inf"), "kept": float("inf")}
    for _ in range(2):
        for setting, value in (("default", "0"), ("kept", "1")):
            out = subprocess.run([sys.executable, __file__, "--once", shape, str(beams), side, precision],
                                 capture_output=True, text=True, check=True,
                                 env={**os.environ, "SEQLAB_KEEP_FREED_MEMORY": value})
            best[setting] = min(best[setting], float(out.stdout.split()[-1]))
    print(json.dumps({"shape": shape, "beams": beams, "side": side, "precision": precision,
                      "seconds": {k: round(v, 2) for k, v in best.items()},
                      "speedup": round(best["default"] / best["kept"], 2), **cpu_report(before)}, indent=1))


if __name__ == "__main__":
    if sys.argv[1] == "--once":
        print(once(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]))
    else:
        main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
