"""t5-small beam 5 against CTranslate2 at one revision of seqlab, alternating the engines in one process
(what the families bench times: its random t5-small, its 64 sources, its rules), so that a drift of the
machine moves both: `PYTHONPATH=<worktree>/src python benchmarks/ct2_bisect.py --rounds 5`.

Run it at two revisions in turn (each from its own worktree's src/, the same virtualenv) to tell whether a
change of the ratio is the code's or the machine's. Prints one JSON line: the revision's best seconds per
engine and CTranslate2's seconds over seqlab's (> 1: seqlab faster), with the CPU's flags and other load.
"""

from __future__ import annotations

import argparse
import importlib
import json

import torch


def families_module():
    """The families bench wherever the revision keeps it (seqlab.bench.families, earlier analysis.bench_families)."""
    for name in ("seqlab.bench.families", "seqlab.analysis.bench_families"):
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    raise SystemExit("no families bench in this revision")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shape", default="t5-small")
    parser.add_argument("--beams", type=int, default=5)
    args = parser.parse_args()
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    import seqlab
    from seqlab import hardware
    from seqlab.decoding import DecodingConfig
    from seqlab.interop.hf import from_hf

    fam = families_module()
    bench = importlib.import_module("seqlab.bench.speed" if fam.__name__.startswith("seqlab.bench")
                                    else "seqlab.analysis.bench")
    cfg = bench.BenchConfig()
    kind, values = fam.SHAPES[args.shape]
    torch.set_num_threads(2)
    torch.manual_seed(cfg.seed)
    hf = AutoModelForSeq2SeqLM.from_config(AutoConfig.for_model(kind, **values, dropout=0.0)).eval()
    model = from_hf(hf)
    src, mask = fam.random_sources(cfg.decode_sources, cfg.seq_len, values["vocab_size"], values["pad_token_id"],
                                   values["eos_token_id"], torch.Generator().manual_seed(cfg.seed))
    engine = fam.ct2_engine(model)
    decoding = DecodingConfig(method="beam" if args.beams > 1 else "greedy", num_beams=args.beams,
                              max_length=cfg.max_new_tokens, early_stopping=True, suppress_special=False)
    runs = {"seqlab": lambda: fam.timed_seqlab(model, src, mask, decoding),
            "ct2": lambda: fam.timed_ct2(engine, src, mask, decoding)}
    for run in runs.values():
        run()  # warm-up
    best = {name: float("inf") for name in runs}
    outputs = {}
    clock = getattr(hardware, "CpuClock", None)
    before = clock.now() if clock else None
    for _ in range(args.rounds):
        for name, run in runs.items():  # alternating: a slower minute slows both
            out, seconds = run()
            best[name], outputs[name] = min(best[name], seconds), out
    print(json.dumps({"revision": seqlab.__file__, "shape": args.shape, "beams": args.beams,
                      "seqlab_s": round(best["seqlab"], 3), "ct2_s": round(best["ct2"], 3),
                      "ct2_over_seqlab": round(best["ct2"] / best["seqlab"], 3),
                      "equal": sum(a == b for a, b in zip(outputs["seqlab"], outputs["ct2"], strict=True)),
                      "cpu": hardware.cpu_model(),
                      "flags": sorted(f for f in hardware.cpu_flags() if f.startswith(("avx", "amx"))),
                      "others_busy_cores": before.others_busy_cores(clock.now()) if before else None}))


if __name__ == "__main__":
    main()
