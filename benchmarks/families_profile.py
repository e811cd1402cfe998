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
import json

from torch.profiler import ProfilerActivity, profile

from ct2_bisect import alternated, family_setup, trimmed_calls  # benchmarks/, beside this script

PRODUCTS = ("aten::addmm", "aten::mm", "aten::bmm", "aten::_mkl_linear", "aten::baddbmm", "mkldnn::_linear_pointwise")


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

    it = family_setup(args.shape, args.beams, args.sources)
    fam, model, decoding = it.families, it.model, it.decoding
    if args.onednn:  # after the export: CTranslate2 converts the plain model
        from seqlab.model.onednn import onednn_linears

        model = onednn_linears(model)
    engines = {"seqlab": lambda s, m: fam.timed_seqlab(model, s, m, decoding),
               "ct2": lambda s, m: fam.timed_ct2(it.engine, s, m, decoding)}
    runs = {name: (lambda timed=timed: trimmed_calls(it.src, it.mask, args.batch, timed))
            for name, timed in engines.items()}
    print(json.dumps({"shape": args.shape, "beams": args.beams, "batch": args.batch, "onednn": args.onednn,
                      **alternated(runs, args.rounds)}))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        runs["seqlab"]()
    averages = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in averages)
    products = sum(e.self_cpu_time_total for e in averages if e.key in PRODUCTS)
    print(f"matrix products: {products / total:.1%} of self CPU time ({total / 1e6:.2f} s profiled)")
    print(averages.table(sort_by="self_cpu_time_total", row_limit=args.rows))
    if args.counts:
        with open(args.counts, "w") as f:
            json.dump({e.key: [e.count, e.self_cpu_time_total] for e in averages}, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
