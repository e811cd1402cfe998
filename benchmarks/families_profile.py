"""Where seqlab's time goes at a families-bench shape, against CTranslate2 in the same process:
`python benchmarks/families_profile.py [--shape t5-small] [--beams 5] [--batch 64] [--onednn]`.

Builds the bench's random model of the shape and its sources (seqlab.bench.families), times seqlab's default
engine (or, with `--onednn`, its oneDNN engine) and CTranslate2 alternately (best of `--rounds`, outputs
compared), then prints torch.profiler's operator summary of one seqlab run: the matrix products (addmm, mm, bmm,
linear) against everything else (the beam's cache moves, the processors, the host work between steps).
`--batch 1` decodes the sources one at a time, as `seqlab translate` reading stdin does. Prints the CPU's flags
and other processes' load.
"""

from __future__ import annotations

import argparse
import importlib
import json

import torch
from torch.profiler import ProfilerActivity, profile

from seqlab import hardware
from seqlab.decoding import DecodingConfig
from seqlab.interop.hf import from_hf


def bench_modules():
    """The families bench and BenchConfig wherever the revision keeps them (seqlab.bench, earlier
    seqlab.analysis), so that two revisions' profiles compare (`--counts` of each, then diff)."""
    for families, speed in (("seqlab.bench.families", "seqlab.bench.speed"),
                            ("seqlab.analysis.bench_families", "seqlab.analysis.bench")):
        try:
            return importlib.import_module(families), importlib.import_module(speed).BenchConfig
        except ModuleNotFoundError:
            continue
    raise SystemExit("no families bench in this revision")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shape", default="t5-small")
    parser.add_argument("--beams", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--sources", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=25, help="operators shown")
    parser.add_argument("--onednn", action="store_true", help="seqlab's oneDNN engine (packed weights) instead")
    parser.add_argument("--counts", help="write each operator's calls and self CPU time (JSON) to this file")
    args = parser.parse_args()
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    fam, BenchConfig = bench_modules()

    cfg = BenchConfig()
    kind, values = fam.SHAPES[args.shape]
    torch.set_num_threads(2)
    torch.manual_seed(cfg.seed)
    hf = AutoModelForSeq2SeqLM.from_config(AutoConfig.for_model(kind, **values, dropout=0.0)).eval()
    model = from_hf(hf)
    src, mask = fam.random_sources(args.sources, cfg.seq_len, values["vocab_size"], values["pad_token_id"],
                                   values["eos_token_id"], torch.Generator().manual_seed(cfg.seed))
    batches = [(src[i:i + args.batch], mask[i:i + args.batch]) for i in range(0, args.sources, args.batch)]
    engine = fam.ct2_engine(model)
    if args.onednn:  # after the export: CTranslate2 converts the plain model
        from seqlab.model.onednn import onednn_linears

        model = onednn_linears(model)
    decoding = DecodingConfig(method="beam" if args.beams > 1 else "greedy", num_beams=args.beams,
                              max_length=cfg.max_new_tokens, early_stopping=True, suppress_special=False)

    def run(timed):  # every batch, trimmed of its padding columns as a caller would
        outs, seconds = [], 0.0
        for s, m in batches:
            width = int((~m).sum(1).max())
            out, t = timed(s[:, :width], m[:, :width])
            outs += out
            seconds += t
        return outs, seconds

    runs = {"seqlab": lambda: run(lambda s, m: fam.timed_seqlab(model, s, m, decoding)),
            "ct2": lambda: run(lambda s, m: fam.timed_ct2(engine, s, m, decoding))}
    for r in runs.values():
        r()
    clock = getattr(hardware, "CpuClock", None)
    before = clock.now() if clock else None
    best, outputs = {k: float("inf") for k in runs}, {}
    for _ in range(args.rounds):
        for name, r in runs.items():
            out, seconds = r()
            best[name], outputs[name] = min(best[name], seconds), out
    print(json.dumps({"shape": args.shape, "beams": args.beams, "batch": args.batch, "onednn": args.onednn,
                      "seqlab_s": round(best["seqlab"], 3),
                      "ct2_s": round(best["ct2"], 3), "ct2_over_seqlab": round(best["ct2"] / best["seqlab"], 3),
                      "equal": sum(a == b for a, b in zip(outputs["seqlab"], outputs["ct2"], strict=True)),
                      "cpu": hardware.cpu_model(),
                      "flags": sorted(f for f in hardware.cpu_flags() if f.startswith(("avx", "amx"))),
                      "others_busy_cores": round(before.others_busy_cores(clock.now()), 2) if before else None}))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        runs["seqlab"]()
    averages = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in averages)
    products = sum(e.self_cpu_time_total for e in averages if e.key in ("aten::addmm", "aten::mm", "aten::bmm",
                                                                          "aten::_mkl_linear", "aten::baddbmm",
                                                                          "mkldnn::_linear_pointwise"))
    print(f"matrix products: {products / total:.1%} of self CPU time ({total / 1e6:.2f} s profiled)")
    print(averages.table(sort_by="self_cpu_time_total", row_limit=args.rows))
    if args.counts:
        with open(args.counts, "w") as f:
            json.dump({e.key: [e.count, e.self_cpu_time_total] for e in averages}, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
