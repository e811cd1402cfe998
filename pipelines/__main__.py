"""`python -m pipelines NAME [--dry-run]`, `--list`, `render [--check]` (see pipelines/__init__.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import seqlab.pipeline.core
from pipelines import PIPELINES
from pipelines.render import render
from seqlab.app.runner import PipelineError, execute
from seqlab.pipeline.devices import DEVICES, on_device


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines", description=__doc__)
    parser.add_argument("name", nargs="?", help=f"an experiment ({', '.join(PIPELINES)}) or 'render'")
    parser.add_argument("--list", action="store_true", help="list the experiments and their stages")
    parser.add_argument("--dry-run", action="store_true", help="print the stages that would run, run nothing")
    parser.add_argument("--check", action="store_true", help="render: only check the docs' tables are current")
    parser.add_argument("--results", type=Path, help="the archives' folder (default: results/ here); e.g. a main "
                        "checkout's, when the stages run from a worktree at a fixed commit")
    parser.add_argument("--commit", action="store_true", help="git-commit each record as it lands")
    parser.add_argument("--rerun", action="append", default=[], metavar="STAGE",
                        help="run this stage again although archived (repeatable; e.g. a measurement after a fix)")
    parser.add_argument("--only", action="append", default=[], metavar="STAGE",
                        help="run only this stage (repeatable; a pattern such as 'prefix_lm-seed?.*') and the "
                             "stages it reads, if the archive lacks them")
    parser.add_argument("--device", choices=DEVICES, default="cpu",
                        help="cuda: the experiment's trainings and decodings on one GPU, archived apart "
                             "(results/NAME-gpu/; seqlab.pipeline.devices)")
    parser.add_argument("--parallel", type=int, default=1, metavar="N",
                        help="run the trainings that read no other stage N at a time (processes sharing a GPU)")
    args = parser.parse_args(argv)
    if args.list or not args.name:
        for p in PIPELINES.values():
            print(f"{p.name}: {p.summary}\n" + "".join(f"  {s.name}: seqlab {s.command} {' '.join(s.overrides)}\n"
                                                       for s in p.stages))
        return 0
    if args.name == "render":
        stale = render(list(PIPELINES.values()), check=args.check)
        for line in stale:
            print(("out of date: " if args.check else "rendered: ") + line)
        return 1 if args.check and stale else 0
    if args.results is not None:  # every archive path derives from core.RESULTS
        seqlab.pipeline.core.RESULTS = args.results
    if args.name not in PIPELINES:
        parser.error(f"unknown experiment {args.name!r}; use one of {', '.join(PIPELINES)} (or --list)")
    try:
        failed = execute(on_device(PIPELINES[args.name], args.device), dry_run=args.dry_run, commit=args.commit,
                         rerun=frozenset(args.rerun), only=frozenset(args.only), parallel=args.parallel)
    except PipelineError as err:
        print(f"pipelines {args.name}: {err}", file=sys.stderr)
        return 2
    if failed:
        print(f"pipelines {args.name}: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    if not args.dry_run and args.results is None:  # a worktree's run: `make render` in the checkout
        render([PIPELINES[args.name]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
