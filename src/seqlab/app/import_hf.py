"""`seqlab import --hf DIR --out FILE.ckpt` (`make import`): a Hugging Face Marian folder as a seqlab checkpoint."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from seqlab.app import cli
from seqlab.interop.importer import import_marian
from seqlab.io import atomic_write


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser("import", __doc__)
    parser.add_argument("--hf", required=True, type=Path, help="a Marian save_pretrained folder")
    parser.add_argument("--out", required=True, type=Path, help="the seqlab checkpoint to write (.ckpt)")
    return cli.run("import", parser, argv, body)


def body(args: argparse.Namespace) -> int:
    missing = [n for n in ("config.json", "source.spm", "target.spm", "vocab.json") if not (args.hf / n).is_file()]
    if missing:
        raise cli.CommandError(f"{args.hf} has no {', '.join(missing)}: not a Marian folder")
    try:
        state = import_marian(args.hf)
    except ValueError as err:  # a Marian config seqlab cannot express (InteropError is one too)
        raise cli.CommandError(str(err)) from None
    atomic_write(args.out, lambda f: torch.save(state, f))
    print(args.out)
    return 0
