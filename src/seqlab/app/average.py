"""`seqlab average --out OUT.ckpt A.ckpt B.ckpt ...` (`make average`): fairseq's checkpoint averaging."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from seqlab.checkpoint import CheckpointError
from seqlab.io import atomic_write
from seqlab.train.average import average_checkpoints


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="seqlab average", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        state = average_checkpoints(args.checkpoints)
    except CheckpointError as err:
        print(f"seqlab average: {err}", file=sys.stderr)
        return 2
    atomic_write(args.out, lambda f: torch.save(state, f))
    print(f"averaged {len(args.checkpoints)} checkpoints -> {args.out}")
    return 0
