"""Example outputs side by side: for evaluations of one test set, the sources where the settings disagree most."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from seqlab.tracking.results import HYPOTHESES_FILE

MAX_SETTINGS = 12  # columns in one table


def read_hypotheses(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """id -> record of a result's hypotheses.jsonl (empty if the file is missing or unreadable)."""
    path = Path(str(result.get("_path", ""))) / HYPOTHESES_FILE
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    except (OSError, json.JSONDecodeError):
        return {}
    return {str(r["id"]): r for r in rows}


def test_set_of(result: dict[str, Any]) -> str:
    """What identifies the examples a result was scored on: its test set, split and example limit."""
    return json.dumps([result.get("test_set"), result.get("split"), result.get("setting", {}).get("limit")],
                      sort_keys=True)


def pick(records: list[dict[str, dict[str, Any]]], n: int) -> list[str]:
    """The n ids whose hypotheses differ most across settings (most distinct outputs, then longest source)."""
    common = set(records[0]).intersection(*records[1:])
    return sorted(common, key=lambda i: (-len({r[i]["hypothesis"] for r in records}), -len(records[0][i]["source"]),
                                         i))[:n]


def example_section(ok: list[dict[str, Any]], n: int = 5) -> str:
    """HTML tables, one per test set evaluated by two or more settings: source, reference, each hypothesis."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for result in ok:
        groups.setdefault(test_set_of(result), []).append(result)
    out = ""
    for results in groups.values():
        results = results[:MAX_SETTINGS]
        records = [read_hypotheses(r) for r in results]
        if len(results) < 2 or not all(records):
            continue
        names = [f"{r.get('checkpoint', {}).get('run_name', '?')}/{r.get('label', '?')}" for r in results]
        head = "".join(f"<th>{html.escape(x)}</th>" for x in ["id", "source", "reference", *names])
        rows = []
        for i in pick(records, n):
            first = records[0][i]
            cells = [i, first["source"], first["reference"], *(r[i]["hypothesis"] for r in records)]
            rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
        out += (f"<h2>Example outputs ({len(results)} settings; the {len(rows)} sources where they disagree most)"
                f"</h2><table class='examples'><tr>{head}</tr>{''.join(rows)}</table>")
    return out
