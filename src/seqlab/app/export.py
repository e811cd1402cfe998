"""`seqlab export --ckpt RUN --out DIR [--format ctranslate2 [--quantization int8]]` (`make export`):
a Hugging Face `save_pretrained` folder or a CTranslate2 model directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from seqlab.decoding import DecodingConfig
from seqlab.interop.ct2 import QUANTIZATIONS
from seqlab.interop.export import export, export_ct2_command
from seqlab.interop.hf import InteropError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="seqlab export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--num-beams", type=int, default=1, help="generation_config default (1 = greedy)")
    parser.add_argument("--length-penalty", type=float, default=1.0)
    parser.add_argument("--max-length", type=int, default=None, help="new tokens (default: the model's limit)")
    parser.add_argument("--force-eos", action="store_true")
    parser.add_argument("--format", choices=["hf", "ctranslate2"], default="hf")
    parser.add_argument("--quantization", default=None,
                        help=f"ctranslate2 only: the weights' type, one of {', '.join(QUANTIZATIONS)}")
    args = parser.parse_args(argv)
    if args.format == "ctranslate2":
        return export_ct2_command(args.ckpt, args.out, args.quantization)
    if args.quantization is not None:
        parser.error("--quantization applies to --format ctranslate2 only")
    decoding = DecodingConfig(method="beam" if args.num_beams > 1 else "greedy", num_beams=args.num_beams,
                              length_penalty=args.length_penalty, max_length=args.max_length,
                              force_eos=args.force_eos)
    try:
        print(export(args.ckpt, args.out, decoding))
    except InteropError as err:
        print(f"seqlab export: {err}", file=sys.stderr)
        return 2
    return 0
