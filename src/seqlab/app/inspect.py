"""`seqlab inspect --ckpt RUN --text "..." [--num-beams 4] [--mbr chrf] [--out page.html] [--figures DIR]`
(`make inspect`): attention maps, the decoding trace and beam tree of one source, as one HTML page; printed,
greedy search's top-k tokens at every step and greedy's against beam search's sequence log-prob (the
text-generation chapter's tables); `--figures`: its figures of the next-token distribution as PNGs."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import get_args

from seqlab.app import cli
from seqlab.checkpoint import load_for_inference
from seqlab.decoding import DecodingConfig
from seqlab.inference.chapter import best, step_table, write_figures
from seqlab.inference.inspection import attention_maps, beam_trace, inspect_page, mbr_candidates, trace
from seqlab.io import atomic_write_text
from seqlab.metrics.utility import Utility


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser("inspect", __doc__)
    parser.add_argument("--ckpt", required=True, help="a .ckpt file or a training run folder")
    parser.add_argument("--text", required=True, help="the source sentence")
    parser.add_argument("--target", help="a reference to attend over (default: the model's greedy output)")
    parser.add_argument("--max-length", type=int, default=None)
    parser.add_argument("--no-repeat-ngram-size", type=int, default=None)
    parser.add_argument("--top-k", type=int, default=5, help="alternatives shown per step")
    parser.add_argument("--num-beams", type=int, default=4, help="beam size of the beam tree (0: no tree)")
    parser.add_argument("--mbr", choices=list(get_args(Utility)), default=None,
                        help="also show MBR's candidates (epsilon 0.02 samples) and expected utilities")
    parser.add_argument("--mbr-candidates", type=int, default=32)
    parser.add_argument("--out", type=Path, default=Path("outputs/inspect.html"))
    parser.add_argument("--figures", type=Path, default=None,
                        help="a folder for temperature.png and truncation.png of the next-token distribution")
    return cli.run("inspect", parser, argv, body)


def body(args: argparse.Namespace) -> int:
    model, tokenizer, info = load_for_inference(args.ckpt)
    cfg = replace(DecodingConfig(), max_length=args.max_length, no_repeat_ngram_size=args.no_repeat_ngram_size)
    maps = attention_maps(model, tokenizer, args.text, args.target, cfg)
    steps = trace(model, tokenizer, args.text, cfg, args.top_k)
    nodes = beam_trace(model, tokenizer, args.text, replace(cfg, method="beam", num_beams=args.num_beams)) \
        if args.num_beams > 1 else None
    page = inspect_page(maps, steps, f"{info.path}: {args.text}", nodes)
    if args.mbr is not None:
        page = page.replace("</body>", mbr_candidates(model, tokenizer, args.text, replace(
            cfg, method="sample", epsilon=0.02, mbr={"utility": args.mbr, "candidates": args.mbr_candidates}))
            + "</body>")
    atomic_write_text(args.out, page)
    print(step_table(steps))
    greedy = best(model, tokenizer, args.text, cfg)
    print(f"greedy: {greedy.text!r}, sequence log-prob {greedy.logprob:.4f}")
    if args.num_beams > 1:
        beam = best(model, tokenizer, args.text, replace(cfg, method="beam", num_beams=args.num_beams))
        print(f"beam {args.num_beams}: {beam.text!r}, sequence log-prob {beam.logprob:.4f}")
    if args.figures is not None:
        for path in write_figures(model, tokenizer, args.text, args.figures):
            print(path)
    print(args.out)
    return 0
