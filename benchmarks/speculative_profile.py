"""Where a speculative call's time goes against a plain greedy step, at the speculative bench's GPT-2 shape:
`python benchmarks/speculative_profile.py [--batch 1] [--k 5] [--prompts 4] [--profile]`.

Builds the bench's random GPT-2-shaped model and prompts (seqlab.bench.speculative), decodes the first
`--prompts` prompts `--batch` at a time greedily and with prompt lookup of k tokens (the proposals that pay,
then every proposal), alternately, best of `--rounds`; prints seconds, decoder calls and seconds per call of
each, and with `--profile` torch.profiler's operator summary of each, so the operators a call adds over a step
stand out; and the decoder calls a batch took against the calls a row took on average: a batch decodes until
its slowest row ends. Prints the CPU's flags and other processes' load.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import torch
from torch.profiler import ProfilerActivity, profile

from ct2_bisect import cpu_report  # benchmarks/, beside this script
from seqlab import hardware
from seqlab.bench.speculative import random_gpt2
from seqlab.bench.speed import BenchConfig
from seqlab.decoding import DecodingConfig, generate
from seqlab.decoding.speculative import SpeculativeStats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--onednn", action="store_true", help="oneDNN's packed weights instead of seqlab's engine")
    parser.add_argument("--profile", action="store_true", help="print each setting's operator summary")
    parser.add_argument("--rows", type=int, default=20, help="operators shown")
    args = parser.parse_args()
    cfg = BenchConfig()
    torch.set_num_threads(2)
    _, model, src, mask = random_gpt2(cfg, max(64, args.prompts))
    if args.onednn:
        from seqlab.model.onednn import onednn_linears

        model = onednn_linears(model)
    greedy = DecodingConfig(max_length=cfg.max_new_tokens, suppress_special=False)
    lookups = [replace(greedy, draft="lookup", draft_tokens=args.k, draft_positions=p) for p in ("paying", "all")]
    settings = {"greedy": greedy, **{d.label: d for d in lookups}}

    decoder_calls = [0]
    decode = type(model).decode

    def counted(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        decoder_calls[0] += 1
        return decode(self, *args, **kwargs)

    type(model).decode = counted

    def run(decoding: DecodingConfig) -> tuple[float, SpeculativeStats, list[list[int]], int]:
        stats, outputs, seconds = SpeculativeStats(), [], 0.0
        decoder_calls[0] = 0
        for i in range(0, args.prompts, args.batch):
            began = time.perf_counter()
            out = generate(model, src[i:i + args.batch], mask[i:i + args.batch], decoding, stats=stats)
            seconds += time.perf_counter() - began
            outputs += [out.sequences[r, 0, : out.lengths[r, 0]].tolist() for r in range(out.sequences.shape[0])]
        return seconds, stats, outputs, decoder_calls[0]

    for decoding in settings.values():
        run(decoding)  # warm-up
    before = hardware.CpuClock.now()
    best: dict[str, tuple[float, SpeculativeStats, list[list[int]], int]] = {}
    for _ in range(args.rounds):
        for name, decoding in settings.items():
            result = run(decoding)
            best[name] = min(best.get(name, result), result, key=lambda r: r[0])
    print(cpu_report(before))
    batches = -(-args.prompts // args.batch)
    for name, (seconds, stats, outputs, decoder) in best.items():
        tokens = sum(map(len, outputs))
        calls = stats.calls or tokens  # plain greedy: one call per row and token
        print(f"{name}: {seconds:.2f} s ({best['greedy'][0] / seconds:.2f}x greedy), {tokens} "
              f"tokens, {calls} row-calls, {seconds / calls * args.batch * 1e3:.1f} ms per call, proposed "
              f"{stats.proposed}, acceptance {stats.acceptance:.2f}, outputs equal greedy's: "
              f"{outputs == best['greedy'][2]}; {decoder / batches:.2f} decoder calls a batch, "
              f"{calls / len(outputs):.2f} a row on average")
    for name, decoding in settings.items() if args.profile else ():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run(decoding)
        print(f"== {name}")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
