"""`seqlab export --ckpt RUN --out DIR [--format ctranslate2 [--quantization int8]]` (`make export`):
a Hugging Face `save_pretrained` folder or a CTranslate2 model directory."""

from __future__ import annotations

import argparse
from pathlib import Path

from seqlab.app import cli
from seqlab.checkpoint import load_for_inference
from seqlab.decoding import DecodingConfig
from seqlab.interop.ct2 import QUANTIZATIONS, export_ctranslate2
from seqlab.interop.export import export


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser("export", __doc__)
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--num-beams", type=int, default=None, help="generation_config default (1 = greedy; "
                                                                    "none given: the checkpoint's own defaults)")
    parser.add_argument("--length-penalty", type=float, default=None)
    parser.add_argument("--max-length", type=int, default=None, help="new tokens (default: the model's limit)")
    parser.add_argument("--force-eos", action="store_true")
    parser.add_argument("--format", choices=["hf", "ctranslate2"], default="hf")
    parser.add_argument("--quantization", default=None,
                        help=f"ctranslate2 only: the weights' type, one of {', '.join(QUANTIZATIONS)}")
    return cli.run("export", parser, argv, body)


def body(args: argparse.Namespace) -> int:
    if args.format == "ctranslate2":
        model, tokenizer, _ = load_for_inference(args.ckpt)
        print(export_ctranslate2(model, tokenizer, args.out, args.quantization))
        return 0
    if args.quantization is not None:
        raise cli.CommandError("--quantization applies to --format ctranslate2 only")
    given = (args.num_beams, args.length_penalty, args.max_length, args.force_eos or None)
    decoding = None if all(v is None for v in given) else DecodingConfig(
        method="beam" if (args.num_beams or 1) > 1 else "greedy", num_beams=args.num_beams or 1,
        length_penalty=1.0 if args.length_penalty is None else args.length_penalty, max_length=args.max_length,
        force_eos=args.force_eos)
    print(export(args.ckpt, args.out, decoding))
    return 0
