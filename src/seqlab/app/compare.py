"""`seqlab compare BASE_RESULT OTHER_RESULT ... [--json PATH]` (result folders or archived records) or
`--refs R.txt --hyps A.txt B.txt` (`make compare`):
paired significance, as seqlab.analysis.compare describes."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from seqlab.analysis.compare import (
    CompareError,
    add_by_length,
    compare,
    distinct_names,
    from_result,
    from_text_files,
    recorded_neural,
    significance_table,
)
from seqlab.app import cli
from seqlab.io import atomic_write_text
from seqlab.metrics import declarations as M
from seqlab.metrics.significance import N_AR, N_BOOTSTRAP, SACREBLEU_DEFAULT_SEED


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser("compare", __doc__)
    parser.add_argument("results", nargs="*", type=Path,
                        help="evaluation result folders or archived evaluation records "
                             "(results/EXPERIMENT/STAGE.json), the baseline first")
    parser.add_argument("--refs", action="append", type=Path, default=[], help="reference file (repeatable)")
    parser.add_argument("--hyps", nargs="+", type=Path, default=[], help="hypothesis files, the baseline first")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--seed", type=int, default=SACREBLEU_DEFAULT_SEED, help="resampling seed (> 0)")
    parser.add_argument("--n-bootstrap", type=int, default=N_BOOTSTRAP)
    parser.add_argument("--n-ar", type=int, default=N_AR)
    parser.add_argument("--metrics", nargs="+", default=None, metavar="METRIC",
                        help=f"which metrics, of {' '.join(M.comparable())} (default: "
                             f"{' '.join(M.default_compared())} and each neural metric every result folder recorded)")
    parser.add_argument("--by-length", action="store_true",
                        help="also BLEU and chrF per source-length bucket, each with its paired bootstrap")
    return cli.run("compare", parser, argv, body, level=logging.WARNING)


def body(args: argparse.Namespace) -> int:
    if args.results and (args.refs or args.hyps):
        raise CompareError("give either result folders or --refs/--hyps files, not both")
    if args.hyps or args.refs:
        if not (args.hyps and args.refs):
            raise CompareError("plain-text systems need both --refs REF.txt and --hyps BASE.txt OTHER.txt ...")
        systems = from_text_files(args.refs, args.hyps)
    elif args.results:
        systems = distinct_names([from_result(p) for p in args.results])
    else:
        raise CompareError("nothing to compare: give result folders, or --refs and --hyps")
    metrics = args.metrics or [*M.default_compared(), *recorded_neural(systems)]
    report = compare(systems, args.seed, args.n_bootstrap, args.n_ar, metrics)
    if args.by_length:
        add_by_length(report, systems, args.seed, args.n_bootstrap)
    print(significance_table(report, systems))
    if args.json:
        atomic_write_text(args.json, json.dumps(report.to_dict(systems), indent=2))
    return 0
