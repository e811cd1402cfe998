"""Report sections about decoding methods: MBR's candidates and choices, and the beam-search curse."""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path
from typing import Any

from seqlab.metrics import keys as K
from seqlab.tracking.examples import read_hypotheses, test_set_of
from seqlab.tracking.figures import png
from seqlab.tracking.results import CANDIDATES_FILE

CURSE_METRICS = ((K.HYP_SEQ_LOGPROB, "mean sequence log-prob (nats)"), (K.BLEU, "BLEU"),
                 (K.LENGTH_RATIO, "length ratio (hyp / ref)"), (K.SHORT_SHARE, "% empty or < half the reference"))


def read_candidates(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A result's candidates.jsonl rows (empty when it has none)."""
    path = Path(str(result.get("_path", ""))) / CANDIDATES_FILE
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    except (OSError, json.JSONDecodeError):
        return []


def candidates_table(row: dict[str, Any], utility: str, source: str, reference: str | None,
                     max_rows: int = 8) -> str:
    """One source's MBR candidates (a candidates.jsonl row): each distinct text with how often it was drawn
    and its expected utility, best first, the chosen one marked."""
    counts = Counter(row["candidates"])
    utility_of = {t: row["expected_utility"][row["candidates"].index(t)] for t in counts}
    chosen = row["candidates"][row["chosen"]]
    lines = "".join(f"<tr class='{'chosen' if t == chosen else ''}'><td>{utility_of[t]:.2f}</td>"
                    f"<td>{counts[t]}</td><td>{html.escape(t)}</td></tr>"
                    for t in sorted(counts, key=lambda t: -utility_of[t])[:max_rows])
    ref = f"<br>reference: {html.escape(reference)}" if reference is not None else ""
    return (f"<p><b>{html.escape(str(row.get('id', '')))}</b> {html.escape(source)}{ref}</p><table class='mbr'>"
            f"<tr><th>expected {html.escape(utility)}</th><th>drawn</th><th>candidate ({len(counts)} distinct "
            f"of {len(row['candidates'])})</th></tr>{lines}</table>")


def mbr_section(ok: list[dict[str, Any]], n: int = 3) -> str:
    """For each MBR result, n sources where MBR did not pick the first candidate (the most varied first)."""
    out = ""
    for result in ok:
        rows = read_candidates(result)
        if not rows:
            continue
        records = read_hypotheses(result)
        moved = [r for r in rows if r["chosen"] != 0] or rows
        picked = sorted(moved, key=lambda r: (-len(set(r["candidates"])), str(r["id"])))[:n]
        utility = result.get("decoding", {}).get("mbr", {}).get("utility", "?")
        name = f"{result.get('checkpoint', {}).get('run_name', '?')}/{result.get('label', '?')}"
        out += f"<h2>MBR choices: {html.escape(name)}</h2>" + "".join(
            candidates_table(row, utility, records.get(str(row["id"]), {}).get("source", ""),
                             records.get(str(row["id"]), {}).get("reference", "")) for row in picked)
    return out


def curse_groups(ok: list[dict[str, Any]]) -> dict[tuple[str, float], list[dict[str, Any]]]:
    """Plain beam-search results by (checkpoint and test set, length penalty), with 3+ beam sizes each."""
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in ok:
        d = r.get("decoding", {})
        if d.get("method") != "beam" or d.get("mbr") or d.get("num_beam_groups", 1) > 1 or d.get("n_best", 1) > 1:
            continue
        key = json.dumps([r.get("checkpoint", {}).get("path"), test_set_of(r)])
        groups.setdefault((key, float(d.get("length_penalty", 1.0))), []).append(r)
    return {k: sorted(v, key=lambda r: r["decoding"]["num_beams"]) for k, v in groups.items()
            if len({r["decoding"]["num_beams"] for r in v}) >= 3}


def beam_curse_section(ok: list[dict[str, Any]]) -> str:
    """Metrics against beam size, one line per length penalty: larger beams find more probable outputs,
    which are shorter and, past a point, worse (Koehn & Knowles 2017; Stahlberg & Byrne 2019)."""
    groups = curse_groups(ok)
    by_checkpoint: dict[str, dict[float, list[dict[str, Any]]]] = {}
    for (key, lp), results in groups.items():
        by_checkpoint.setdefault(key, {})[lp] = results
    out = ""
    for lines in by_checkpoint.values():
        def draw(axes: Any, lines: dict[float, list[dict[str, Any]]] = lines) -> None:
            for ax, (metric, label) in zip(axes.flat, CURSE_METRICS, strict=True):
                for lp, results in sorted(lines.items()):
                    rs = [r for r in results if metric in r["metrics"]]
                    ax.plot([r["decoding"]["num_beams"] for r in rs], [r["metrics"][metric] for r in rs], "o-",
                            label=f"length penalty {lp:g}")
                ax.set_xscale("log", base=2)
                ax.set_xlabel("beam size")
                ax.set_title(label, fontsize=9)
                ax.legend(fontsize=7)

        first = next(iter(lines.values()))[0]
        name = f"{first.get('checkpoint', {}).get('run_name', '?')} ({first.get('split', '')})"
        out += (f"<h2>The beam-search curse: {html.escape(name)}</h2>"
                f"<img src='data:image/png;base64,{png(draw, width=9.0, height=6.0, grid=(2, 2))}'/>")
    return out
