"""`seqlab average --out OUT.ckpt A.ckpt B.ckpt ...` (`make average`): fairseq's checkpoint averaging."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from seqlab.app import cli
from seqlab.io import atomic_write
from seqlab.train.average import average_checkpoints


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser("average", __doc__)
    parser.add_argument("checkpoints", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    return cli.run("average", parser, argv, body)


def body(args: argparse.Namespace) -> int:
    state = average_checkpoints(args.checkpoints)  # CheckpointError: exit status 2, naming the file
    atomic_write(args.out, lambda f: torch.save(state, f))
    print(f"averaged {len(args.checkpoints)} checkpoints -> {args.out}")
    return 0
