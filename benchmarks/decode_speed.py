"""Decoding speed of a checkpoint on its own test split: `python benchmarks/decode_speed.py CKPT [--beams 4]`.

Times `seqlab.inference.evaluation.decode_texts` on the first N test sources after a short warm-up (the best
of `--repeats` runs) and prints tokens/s with the thread count; for comparing thread and OpenMP wait-policy
settings on a machine (docs/performance.md, "Shared machines"), or two commits of the search (`--hyps FILE`
writes each source's best hypothesis, one JSON list of ids per line, to check that they decode the same).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from seqlab.checkpoint import load_for_inference
from seqlab.data import DataConfig, load_split
from seqlab.decoding import DecodingConfig
from seqlab.inference.evaluation import decode_texts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("ckpt")
    parser.add_argument("--beams", type=int, default=1, help="1 = greedy")
    parser.add_argument("--n", type=int, default=300, help="test sources to decode")
    parser.add_argument("--max-length", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=1, help="timed runs; the fastest is reported")
    parser.add_argument("--hyps", type=Path, default=None, help="write the best hypotheses' ids here")
    args = parser.parse_args(argv)
    model, tokenizer, info = load_for_inference(args.ckpt)
    sources = [e.source for e in load_split(DataConfig.from_dict(info.data_config).corpus, "test")[: args.n]]
    cfg = DecodingConfig(method="beam" if args.beams > 1 else "greedy", num_beams=args.beams,
                         max_length=args.max_length)
    decode_texts(model, tokenizer, sources[:20], cfg, 8000)  # warm-up
    seconds = float("inf")
    for _ in range(args.repeats):
        start = time.perf_counter()
        decoded = decode_texts(model, tokenizer, sources, cfg, 8000)
        seconds = min(seconds, time.perf_counter() - start)
    print(f"{cfg.label} threads={torch.get_num_threads()} {decoded.generated_tokens / seconds:.0f} tokens/s "
          f"(best of {args.repeats})")
    if args.hyps is not None:
        args.hyps.write_text("".join(json.dumps(h[0][0]) + "\n" for h in decoded.hypotheses))


if __name__ == "__main__":
    main()
