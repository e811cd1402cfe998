"""MBR's cost on a checkpoint's test split: `python benchmarks/mbr_speed.py CKPT [--n 1106] [--candidates 32]`.

Generates each source's epsilon-sampled candidates once (timed), then computes the expected utilities
three ways on the same candidates: seqlab's utility matrices (`seqlab.decoding.mbr.choose`), and the
per-pair calls of sacreBLEU that a direct implementation makes (timed on the first `--naive` sources,
the ratio is per source). Prints the CPU, the thread count and every time; the choices must agree.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from sacrebleu import sentence_bleu, sentence_chrf

from seqlab.checkpoint import load_for_inference
from seqlab.data import DataConfig, load_split
from seqlab.decoding import DecodingConfig
from seqlab.decoding.mbr import choose
from seqlab.hardware import cpu_description
from seqlab.inference.evaluation import decode_texts

PER_PAIR = {"chrf": lambda h, r: sentence_chrf(h, [r]).score, "bleu": lambda h, r: sentence_bleu(h, [r]).score}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("ckpt")
    parser.add_argument("--n", type=int, default=None, help="test sources (default: all)")
    parser.add_argument("--candidates", type=int, default=32)
    parser.add_argument("--naive", type=int, default=40, help="sources scored pair by pair for the ratio")
    args = parser.parse_args(argv)
    model, tokenizer, info = load_for_inference(args.ckpt)
    sources = [e.source for e in load_split(DataConfig.from_dict(info.data_config).corpus, "test")][: args.n]
    cfg = DecodingConfig(method="sample", epsilon=0.02, n_best=args.candidates)
    print(f"{cpu_description()}; threads={torch.get_num_threads()}; {len(sources)} sources x {args.candidates} "
          "epsilon-0.02 candidates")
    decoded = decode_texts(model, tokenizer, sources, cfg, 8000)
    cands = [[tokenizer.decode_target(ids) for ids, _, _ in hyps] for hyps in decoded.hypotheses]
    print(f"candidates: {decoded.seconds:.1f} s ({decoded.seconds / len(sources) * 1000:.1f} ms per source)")
    for utility, per_pair in PER_PAIR.items():
        start = time.perf_counter()
        choices = [choose(utility, c) for c in cands]
        ours = time.perf_counter() - start
        start = time.perf_counter()
        naive = [np.array([[per_pair(h, r) for r in c] for h in c]).mean(1) for c in cands[: args.naive]]
        pairwise = (time.perf_counter() - start) / len(naive) * len(sources)
        same = sum(int(np.argmax(eu)) == ch.chosen or abs(eu.max() - eu[ch.chosen]) < 1e-9
                   for eu, ch in zip(naive, choices, strict=False))
        print(f"{utility}: utilities {ours:.1f} s ({ours / decoded.seconds:.2f}x the candidates); per-pair "
              f"sacreBLEU {pairwise:.1f} s (from {len(naive)} sources), {pairwise / ours:.1f}x slower; "
              f"same choice on {same}/{len(naive)}")


if __name__ == "__main__":
    main()
