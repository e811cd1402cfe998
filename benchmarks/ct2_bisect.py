"""t5-small beam 5 against CTranslate2 at one revision of seqlab, alternating the engines in one process
(what the families bench times: its random t5-small, its 64 sources, its rules), so that a drift of the
machine moves both: `PYTHONPATH=<worktree>/src python benchmarks/ct2_bisect.py --rounds 5`.

Run it at two revisions in turn (each from its own worktree's src/, the same virtualenv) to tell whether a
change of the ratio is the code's or the machine's. Prints one JSON line: the revision's best seconds per
engine and CTranslate2's seconds over seqlab's (> 1: seqlab faster), with the CPU's flags and other load.
`--per-call 1 --sources 16` times one source a call instead (as `seqlab translate` reading stdin decodes), each
call trimmed of its padding, for either engine; `--shape`/`--beams` pick another families-bench row.
"""

from __future__ import annotations

import argparse
import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


def bench_modules() -> tuple[Any, Any]:
    """The families bench and its BenchConfig wherever the revision keeps them (seqlab.bench, earlier
    seqlab.analysis), so that two revisions run the same bench."""
    for families, speed in (("seqlab.bench.families", "seqlab.bench.speed"),
                            ("seqlab.analysis.bench_families", "seqlab.analysis.bench")):
        try:
            return importlib.import_module(families), importlib.import_module(speed).BenchConfig
        except ModuleNotFoundError:
            continue
    raise SystemExit("no families bench in this revision")


@dataclass
class FamilySetup:
    """A families-bench shape as the bench builds it: its random model in seqlab, the bench's random sources,
    CTranslate2 on an export of the model, and the bench's decoding rules."""

    families: Any  # the revision's families bench module
    model: Any
    src: torch.Tensor
    mask: torch.Tensor
    engine: Any
    decoding: Any


def family_setup(shape: str, beams: int, sources: int | None = None) -> FamilySetup:
    """`shape` built as the families bench builds it, `sources` of its random sources (None: the bench's
    number), 2 threads."""
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    from seqlab.decoding import DecodingConfig
    from seqlab.interop.hf import from_hf

    fam, bench_config = bench_modules()
    cfg = bench_config()
    kind, values = fam.SHAPES[shape]
    torch.set_num_threads(2)
    torch.manual_seed(cfg.seed)
    hf = AutoModelForSeq2SeqLM.from_config(AutoConfig.for_model(kind, **values, dropout=0.0)).eval()
    model = from_hf(hf)
    src, mask = fam.random_sources(sources or cfg.decode_sources, cfg.seq_len, values["vocab_size"],
                                   values["pad_token_id"], values["eos_token_id"],
                                   torch.Generator().manual_seed(cfg.seed))
    decoding = DecodingConfig(method="beam" if beams > 1 else "greedy", num_beams=beams,
                              max_length=cfg.max_new_tokens, early_stopping=True, suppress_special=False)
    return FamilySetup(fam, model, src, mask, fam.ct2_engine(model), decoding)


def cpu_report(before: Any) -> dict[str, Any]:
    """The CPU's model, its speed flags and other processes' load since `before` (hardware.CpuClock.now(); None
    where this seqlab has no clock)."""
    from seqlab import hardware

    after = hardware.CpuClock.now() if before is not None else None
    return {"cpu": hardware.cpu_model(),
            "flags": sorted(f for f in hardware.cpu_flags() if f.startswith(("avx", "amx"))),
            "others_busy_cores": round(before.others_busy_cores(after), 2) if before is not None else None}


def trimmed_calls(src: Tensor, mask: Tensor, per_call: int,
                  timed: Callable[[Tensor, Tensor], tuple[list[list[int]], float]]) -> tuple[list[list[int]], float]:
    """The sources decoded `per_call` at a time, each call trimmed of its padding columns as a caller would:
    (outputs, seconds summed)."""
    outputs, seconds = [], 0.0
    for i in range(0, src.shape[0], per_call):
        s, m = src[i:i + per_call], mask[i:i + per_call]
        width = int((~m).sum(1).max())
        out, t = timed(s[:, :width], m[:, :width])
        outputs, seconds = outputs + out, seconds + t
    return outputs, seconds


def alternated(runs: dict[str, Callable[[], tuple[list[list[int]], float]]], rounds: int) -> dict[str, Any]:
    """Each run (-> outputs, seconds) warmed up, then `rounds` times in turn (a slower minute slows both): the
    best seconds of "seqlab" and "ct2", their ratio, the outputs equal, the CPU's flags and other load."""
    from seqlab import hardware

    for run in runs.values():
        run()  # warm-up
    best = {name: float("inf") for name in runs}
    outputs = {}
    clock = getattr(hardware, "CpuClock", None)
    before = clock.now() if clock else None
    for _ in range(rounds):
        for name, run in runs.items():
            out, seconds = run()
            best[name], outputs[name] = min(best[name], seconds), out
    return {"seqlab_s": round(best["seqlab"], 3), "ct2_s": round(best["ct2"], 3),
            "ct2_over_seqlab": round(best["ct2"] / best["seqlab"], 3),
            "equal": sum(a == b for a, b in zip(outputs["seqlab"], outputs["ct2"], strict=True)), **cpu_report(before)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shape", default="t5-small")
    parser.add_argument("--beams", type=int, default=5)
    parser.add_argument("--sources", type=int, default=None, help="how many of the bench's sources (default all)")
    parser.add_argument("--per-call", type=int, default=None,
                        help="sources a call, each call trimmed of its padding (default all in one call)")
    args = parser.parse_args()
    import seqlab

    it = family_setup(args.shape, args.beams, args.sources)
    fam, model, src, mask, decoding = it.families, it.model, it.src, it.mask, it.decoding
    per_call = args.per_call or src.shape[0]
    runs = {"seqlab": lambda: trimmed_calls(src, mask, per_call,
                                            lambda s, m: fam.timed_seqlab(model, s, m, decoding)),
            "ct2": lambda: trimmed_calls(src, mask, per_call, lambda s, m: fam.timed_ct2(it.engine, s, m, decoding))}
    print(json.dumps({"revision": seqlab.__file__, "shape": args.shape, "beams": args.beams,
                      "sources": src.shape[0], "per_call": per_call, **alternated(runs, args.rounds)}))


if __name__ == "__main__":
    main()
