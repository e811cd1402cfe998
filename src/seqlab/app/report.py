"""`seqlab report [--results DIR] [--out FILE]` (`make report`): the local report of every result on disk, a
dashboard page (FILE) with its data as JSON beside it (FILE with the suffix .json)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from seqlab.analysis.pairs import report_pairs, significance_marks
from seqlab.app import cli
from seqlab.checkpoint import CheckpointError, load_for_inference
from seqlab.inference.inspection import inspect_section
from seqlab.tracking.examples import read_hypotheses
from seqlab.tracking.report import markdown_table, write_report
from seqlab.tracking.results import OK, load_results

log = logging.getLogger("seqlab.report")


def inspections(results: list[dict[str, Any]], sentences: int = 2, checkpoints: int = 4) -> str:
    """Alignments and greedy traces of the first test sentences of each evaluated checkpoint (a few)."""
    seen: dict[str, dict[str, Any]] = {}
    for r in results:
        path = r.get("checkpoint", {}).get("path")
        if r.get("status") == OK and path and path not in seen and Path(path).is_file():
            seen[path] = r
    html_parts = []
    for path, result in list(seen.items())[:checkpoints]:
        sources = [row["source"] for row in list(read_hypotheses(result).values())[:sentences]]
        try:
            model, tokenizer, _ = load_for_inference(path)
        except CheckpointError as err:
            log.warning("not inspected: %s", err)
            continue
        html_parts.append(inspect_section(model, tokenizer, sources, str(path)))
    return "".join(html_parts)


def build_report(results_dir: Path, out: Path, inspect: int = 2) -> tuple[Path, list[dict[str, Any]]]:
    """The report of every result under results_dir; returns its path and the results."""
    results = load_results(results_dir)
    if not results:
        raise cli.CommandError(f"{results_dir}: no metrics.json found; run `make eval` or `make sweep-decoding` "
                               "first")
    path = write_report(results, out, title=f"seqlab report: {results_dir}", pairs=report_pairs(results),
                        extra=inspections(results, inspect) if inspect > 0 else "")
    log.info("wrote %s and %s (%d runs)", path, path.with_suffix(".json"), len(results))
    return path, results


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser("report", __doc__)
    parser.add_argument("--results", type=Path, default=Path("outputs/eval_results"))
    parser.add_argument("--out", type=Path, default=Path("outputs/report.html"))
    parser.add_argument("--markdown", action="store_true", help="also print a markdown table of the settings")
    parser.add_argument("--inspect", type=int, default=2,
                        help="test sentences per evaluated checkpoint shown with alignments and traces (0: none)")
    return cli.run("report", parser, argv, body)


def body(args: argparse.Namespace) -> int:
    path, results = build_report(args.results, args.out, args.inspect)
    print(path)
    if args.markdown:
        print(markdown_table(results, significance_marks(results)))
    return 0
