"""Where greedy search of one prompt a call spends its time, against CTranslate2's:
`python benchmarks/one_prompt_gap.py [--shape gpt2] [--prompts 16] [--repeats 3]`.

At a one-source bench shape (random weights, the bench's random prompts), seqlab's default engine,
`engine=seqlab_compiled`, the same engine with every one-row product taken one way (`weight_left`: as before
the engine tuned them, `onednn`, `reduction`) and CTranslate2 fp32 decode the first `--prompts` prompts one per
call, greedy, with 1 and with 40 new tokens (the random models never end early): the first is each engine's
cost of a call (its setup, the prompt's pass, one token), the difference its 39 later steps, printed as
milliseconds a step. All in one process, so that they compare on one machine state: the same engine's step
moved by up to 1.5x between processes on the AVX-512 EPYC. Then the floor
under a step: the model's linear layers and output layer, one row through each, as the default engine takes
it (`model.products.linear`), at the GB/s its weights are read, and each layer shape's one-row speedup over
weight-left through oneDNN's product on the plain weight and through Inductor's own loop
(`model.one_row.tune_one_row`, what engine=seqlab_compiled measures as it is made). `--engines none`: the floor
and the shapes only. Prints the CPU's flags and other processes' load.
"""

from __future__ import annotations

import argparse
import json
from functools import partial

import torch
from torch.profiler import ProfilerActivity, profile

from ct2_bisect import cpu_report  # benchmarks/, beside this script
from seqlab import hardware
from seqlab.bench.families import ONE_AT_A_TIME, ct2_engine, one_by_one, search, timed_ct2, timed_seqlab
from seqlab.bench.one_source import model_and_sources, timed_engine
from seqlab.bench.speed import BenchConfig
from seqlab.engines.compiled import CompiledEngine, compile_step, shared_copy
from seqlab.hardware import best_ms, best_of
from seqlab.model import products
from seqlab.model.one_row import tune_one_row

WAYS = (products.WEIGHT_LEFT, products.ONEDNN, products.REDUCTION)


def one_way_engine(model: torch.nn.Module, way: str) -> CompiledEngine:
    """engine=seqlab_compiled with every one-row product taken `way`, whatever its tuning measured."""
    engine = CompiledEngine(model)
    for m in engine.one_row.modules():
        if isinstance(m, products.Linear):
            m.one_row = way
    engine.own = compile_step(engine.one_row, freeze=True)
    return engine


def products_floor(model: torch.nn.Module, repeats: int) -> dict[str, float]:
    """One row through every linear layer of the model (the output layer included): best ms and GB/s."""
    weights = [(m.weight, m.bias) for m in model.modules() if isinstance(m, torch.nn.Linear)]
    rows = [torch.randn(1, w.shape[1]) for w, _ in weights]
    with torch.no_grad():
        ms = best_ms(lambda: [products.linear(x, w, b) for x, (w, b) in zip(rows, weights, strict=True)],
                     repeats, warmup=2)
    megabytes = sum(w.numel() for w, _ in weights) * 4 / 1e6
    return {"products_ms": round(ms, 2), "weights_mb": round(megabytes, 1), "gb_per_s": round(megabytes / ms, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shape", default="gpt2")
    parser.add_argument("--prompts", type=int, default=ONE_AT_A_TIME)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engines", default="seqlab,compiled,ct2",
                        help="of seqlab,compiled,weight_left,onednn,reduction,ct2; none")
    parser.add_argument("--profile", action="store_true", help="also torch.profiler's table of one compiled run")
    args = parser.parse_args()
    torch.set_num_threads(2)
    before = hardware.CpuClock.now()
    cfg = BenchConfig()
    model, src, mask = model_and_sources(args.shape, cfg)
    src, mask = src[:args.prompts], mask[:args.prompts]
    engines = args.engines.split(",")
    print(json.dumps({"shape": args.shape, **products_floor(model, 10 * args.repeats)}))
    speedups = tune_one_row(shared_copy(model), repeats=10 * args.repeats)
    print(json.dumps({"one_row_speedup_over_weight_left": {f"{i}->{o}": {way: round(x, 2) for way, x in ways.items()}
                                                           for (i, o), ways in speedups.items()}}), flush=True)
    compiled = CompiledEngine(model) if "compiled" in engines else None
    one_way = {way: one_way_engine(model, way) for way in WAYS if way in engines}
    ct2 = ct2_engine(model) if "ct2" in engines else None
    seconds: dict[int, dict[str, float]] = {}
    for new in (1, 40) if set(engines) & {"seqlab", "compiled", "ct2", *WAYS} else ():
        decoding = search(1, BenchConfig(max_new_tokens=new))
        calls = {"seqlab": partial(timed_seqlab, model, decoding=decoding)}
        if compiled is not None:
            calls["compiled"] = partial(timed_engine, compiled, model, decoding=decoding)
        for way, engine in one_way.items():
            calls[way] = partial(timed_engine, engine, model, decoding=decoding)
        if ct2 is not None:
            calls["ct2"] = partial(timed_ct2, ct2, decoding=decoding)
        calls = {k: v for k, v in calls.items() if k in engines}
        runs = {k: partial(one_by_one, f, src, mask) for k, f in calls.items()}
        for run in runs.values():
            run()  # the warm-up: compiles
        best = best_of(runs, args.repeats)
        seconds[new] = {k: s for k, (_, s) in best.items()}
        lengths = {k: sum(map(len, out)) for k, (out, _) in best.items()}
        print(json.dumps({"new_tokens": new, "seconds": seconds[new], "tokens": lengths}), flush=True)
    for k in seconds.get(1, {}):
        call_ms = 1000 * seconds[1][k] / args.prompts
        step_ms = 1000 * (seconds[40][k] - seconds[1][k]) / (39 * args.prompts)
        print(json.dumps({"engine": k, "call_and_first_token_ms": round(call_ms, 2),
                          "later_step_ms": round(step_ms, 2)}))
    if args.profile and compiled is not None:
        decoding = search(1, cfg)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            one_by_one(partial(timed_engine, compiled, model, decoding=decoding), src, mask)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    print(json.dumps(cpu_report(before)))


if __name__ == "__main__":
    main()
