"""Where a speculative call's time goes against a plain greedy step, at the speculative bench's GPT-2 shape:
`python benchmarks/speculative_profile.py [--batch 1] [--k 5] [--prompts 4]`.

Builds the bench's random GPT-2-shaped model and prompts (seqlab.bench.speculative), decodes the first
`--prompts` prompts `--batch` at a time greedily and with prompt lookup of k tokens, prints seconds, decoder
calls and seconds per call of each, then torch.profiler's operator summary of both, so the operators a call
adds over a step stand out. Prints the CPU's flags.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import torch
from torch.profiler import ProfilerActivity, profile

from seqlab import hardware
from seqlab.bench.causal import SHAPES
from seqlab.bench.families import random_sources
from seqlab.bench.speed import BenchConfig
from seqlab.decoding import DecodingConfig, generate
from seqlab.decoding.speculative import SpeculativeStats
from seqlab.interop.hf import from_hf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--rows", type=int, default=20)
    args = parser.parse_args()
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = BenchConfig()
    torch.set_num_threads(2)
    torch.manual_seed(cfg.seed)
    kind, values = SHAPES["gpt2"]
    model = from_hf(AutoModelForCausalLM.from_config(AutoConfig.for_model(kind, **values)).eval())
    src, mask = random_sources(32, cfg.seq_len, model.cfg.src_vocab_size, model.cfg.pad_id, model.cfg.eos_id,
                               torch.Generator().manual_seed(cfg.seed))
    greedy = DecodingConfig(max_length=cfg.max_new_tokens, suppress_special=False)
    settings = {"greedy": greedy, f"lookup{args.k}": replace(greedy, draft="lookup", draft_tokens=args.k)}
    flags = sorted(f for f in hardware.cpu_flags() if f.startswith(("avx", "amx")))
    print({"cpu": hardware.cpu_model(), "flags": flags})

    def run(decoding: DecodingConfig) -> tuple[float, SpeculativeStats, list[list[int]]]:
        stats, outputs, seconds = SpeculativeStats(), [], 0.0
        for i in range(0, args.prompts, args.batch):
            began = time.perf_counter()
            out = generate(model, src[i:i + args.batch], mask[i:i + args.batch], decoding, stats=stats)
            seconds += time.perf_counter() - began
            outputs += [out.sequences[r, 0, : out.lengths[r, 0]].tolist() for r in range(out.sequences.shape[0])]
        return seconds, stats, outputs

    results = {}
    for name, decoding in settings.items():
        run(decoding)  # warm-up
        seconds, stats, outputs = run(decoding)
        calls = stats.calls or sum(map(len, outputs))  # plain greedy: one call per row and token
        results[name] = outputs
        print(f"{name}: {seconds:.2f} s, {sum(map(len, outputs))} tokens, {calls} row-calls, "
              f"{seconds / calls * args.batch * 1e3:.1f} ms per call, acceptance {stats.acceptance:.2f}")
    print("outputs equal:", results["greedy"] == results[f"lookup{args.k}"])
    for name, decoding in settings.items():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run(decoding)
        print(f"== {name}")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
