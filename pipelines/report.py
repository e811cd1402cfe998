"""Build the local HTML report from results on disk: `python pipelines/report.py [--results DIR] [--out FILE]`."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from seqlab.tracking.report import markdown_table, write_report
from seqlab.tracking.results import load_results

log = logging.getLogger("seqlab.report")


def build_report(results_dir: Path, out: Path) -> Path:
    results = load_results(results_dir)
    if not results:
        raise SystemExit(f"{results_dir}: no metrics.json found; run `make eval` or `make sweep-decoding` first")
    path = write_report(results, out, title=f"seqlab report: {results_dir}")
    log.info("wrote %s (%d runs)", path, len(results))
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", type=Path, default=Path("outputs/eval_results"))
    parser.add_argument("--out", type=Path, default=Path("outputs/report.html"))
    parser.add_argument("--markdown", action="store_true", help="also print a markdown table of the settings")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(build_report(args.results, args.out))
    if args.markdown:
        print(markdown_table(load_results(args.results)))


if __name__ == "__main__":
    main()
