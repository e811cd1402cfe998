"""`seqlab import --hf DIR --out FILE.ckpt` (`make import`): a Hugging Face Marian folder as a seqlab checkpoint."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from seqlab.interop.hf import InteropError
from seqlab.interop.importer import import_marian
from seqlab.io import atomic_write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="seqlab import", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hf", required=True, type=Path, help="a Marian save_pretrained folder")
    parser.add_argument("--out", required=True, type=Path, help="the seqlab checkpoint to write (.ckpt)")
    args = parser.parse_args(argv)
    missing = [n for n in ("config.json", "source.spm", "target.spm", "vocab.json") if not (args.hf / n).is_file()]
    if missing:
        print(f"seqlab import: {args.hf} has no {', '.join(missing)}: not a Marian folder",
              file=sys.stderr)
        return 2
    try:
        state = import_marian(args.hf)
    except (InteropError, ValueError) as err:
        print(f"seqlab import: {err}", file=sys.stderr)
        return 2
    atomic_write(args.out, lambda f: torch.save(state, f))
    print(args.out)
    return 0
