"""`seqlab report [--results DIR] [--out FILE]` (`make report`): the local HTML report of every result on disk."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from seqlab.analysis.compare import CompareError, compare, from_result_dir
from seqlab.metrics import keys as K
from seqlab.tracking.examples import test_set_of
from seqlab.tracking.report import markdown_table, write_report
from seqlab.tracking.results import OK, load_results

log = logging.getLogger("seqlab.report")


def significance_marks(results: list[dict[str, Any]], limit: int = 40) -> dict[str, str]:
    """For each test set evaluated by several settings (at most `limit`), BLEU of each against the first
    (greedy first): "+1.23 (p 0.001/0.001) *", the paired bootstrap's and approximate randomization's
    p-values, * where both are < 0.05."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in sorted((r for r in results if r.get("status") == OK),
                    key=lambda r: (r.get("decoding", {}).get("method") != "greedy", str(r.get("_path")))):
        groups.setdefault(test_set_of(r), []).append(r)
    marks: dict[str, str] = {}
    for group in groups.values():
        if not 2 <= len(group) <= limit:
            continue
        try:
            systems = [from_result_dir(Path(r["_path"])) for r in group]
            report = compare(systems, n_ar=1000)
        except CompareError as err:
            log.warning("no significance marks for one test set: %s", err)
            continue
        by_name = {c.system: c for c in report.comparisons if c.metric == K.BLEU}
        marks[group[0]["_path"]] = "baseline"
        for r, s in zip(group[1:], systems[1:], strict=True):
            c = by_name.get(s.name)  # None: the baseline of its own seed
            marks[r["_path"]] = "baseline" if c is None else (
                f"{c.delta:+.2f} (p {c.p_bootstrap:.3f}/{c.p_ar:.3f})" + (" *" if c.significant() else ""))
    return marks


def inspections(results: list[dict[str, Any]], sentences: int = 2, checkpoints: int = 4) -> str:
    """Alignments and greedy traces of the first test sentences of each evaluated checkpoint (a few)."""
    from seqlab.checkpoint import CheckpointError, load_for_inference
    from seqlab.inference.inspection import inspect_section
    from seqlab.tracking.examples import read_hypotheses

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


def build_report(results_dir: Path, out: Path, inspect: int = 2
                 ) -> tuple[Path, list[dict[str, Any]], dict[str, str]]:
    """The HTML report of every result under results_dir; returns its path, the results and their marks."""
    results = load_results(results_dir)
    if not results:
        raise SystemExit(f"{results_dir}: no metrics.json found; run `make eval` or `make sweep-decoding` first")
    marks = significance_marks(results)
    path = write_report(results, out, title=f"seqlab report: {results_dir}", marks=marks,
                        extra=inspections(results, inspect) if inspect > 0 else "")
    log.info("wrote %s (%d runs)", path, len(results))
    return path, results, marks


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="seqlab report", description=__doc__)
    parser.add_argument("--results", type=Path, default=Path("outputs/eval_results"))
    parser.add_argument("--out", type=Path, default=Path("outputs/report.html"))
    parser.add_argument("--markdown", action="store_true", help="also print a markdown table of the settings")
    parser.add_argument("--inspect", type=int, default=2,
                        help="test sentences per evaluated checkpoint shown with alignments and traces (0: none)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    path, results, marks = build_report(args.results, args.out, args.inspect)
    print(path)
    if args.markdown:
        print(markdown_table(results, marks))
