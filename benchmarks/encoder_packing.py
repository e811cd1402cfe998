"""An encoder at inference with and without packing (`seqlab.model.transformer.encoder_packing`: the position-wise
layers on the real source tokens only), alternately in one process, at a families-bench shape and each CPU engine
(the default one, oneDNN's packed weights, int8): `python benchmarks/encoder_packing.py SHAPE BEAMS [SOURCES]`,
e.g. `bart-base 1` (greedy search of the bench's 64 random sources, whose random outputs end after a step or two:
the encoder's time).

Prints, per engine, the best of 3 rounds of each, their ratio, how many outputs are the same, the CPU's flags and
other processes' load. Runs under the allocator the commands set (seqlab.memory).
"""

from __future__ import annotations

import json
import sys

from ct2_bisect import cpu_report, family_setup  # benchmarks/, beside this script
from seqlab import hardware
from seqlab.memory import keep_freed_memory
from seqlab.model import transformer
from seqlab.model.onednn import onednn_available, onednn_linears
from seqlab.model.quantize import dynamic_int8


def main(shape: str, beams: int, sources: int | None = None) -> None:
    keep_freed_memory()
    it = family_setup(shape, beams, sources)
    engines = {"default": it.model, "int8": dynamic_int8(it.model)}
    if onednn_available():
        engines["onednn"] = onednn_linears(it.model)
    packing = transformer.encoder_packing
    sides = {"packed": packing, "padded": lambda pad: None}
    before = hardware.CpuClock.now()
    report = {}
    for engine, model in engines.items():
        best, outs = dict.fromkeys(sides, float("inf")), {}
        for round_ in range(4):  # the first a warm-up
            for side, choice in sides.items():
                transformer.encoder_packing = choice
                outs[side], seconds = it.families.timed_seqlab(model, it.src, it.mask, it.decoding)
                best[side] = min(best[side], seconds) if round_ else best[side]
        transformer.encoder_packing = packing
        report[engine] = {"seconds": {k: round(v, 3) for k, v in best.items()},
                          "speedup": round(best["padded"] / best["packed"], 2),
                          "equal": sum(a == b for a, b in zip(outs["packed"], outs["padded"], strict=True))}
    print(json.dumps({"shape": shape, "beams": beams, "sources": int(it.src.shape[0]), "engines": report,
                      **cpu_report(before)}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None)
