"""`seqlab report [--results DIR] [--out FILE]` (`make report`): the local report of every result on disk, a
dashboard page (FILE) with its data as JSON beside it (FILE with the suffix .json)."""

from __future__ import annotations

import argparse
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from seqlab.analysis.compare import CompareError, compare, from_result_dir
from seqlab.analysis.pairs import pair_tests
from seqlab.app import cli
from seqlab.checkpoint import CheckpointError, load_for_inference
from seqlab.inference.inspection import inspect_section
from seqlab.metrics import keys as K
from seqlab.tracking.dashboard import run_id
from seqlab.tracking.examples import read_hypotheses, test_set_of
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


def report_pairs(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The paired tests and differing examples among the finished runs of each test set (seqlab.analysis.pairs),
    runs named by their id on the page; the greedy run first, as the baseline."""
    groups: dict[str, list[int]] = {}
    order = sorted(range(len(results)), key=lambda i: (results[i].get("decoding", {}).get("method") != "greedy",
                                                       str(results[i].get("_path"))))
    for i in order:
        if results[i].get("status") == OK:
            groups.setdefault(test_set_of(results[i]), []).append(i)
    out = []
    for members in groups.values():
        if len(members) < 2:
            continue
        try:
            systems = [replace(from_result_dir(Path(results[i]["_path"])), name=run_id(i)) for i in members]
            out.append(pair_tests(systems).to_dict())
        except CompareError as err:
            log.warning("no paired tests for one test set: %s", err)
    return out


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
