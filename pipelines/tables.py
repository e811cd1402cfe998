"""Tables rendered from a pipeline's archive alone (results/<pipeline>/<stage>.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from seqlab.metrics import keys as K


def records(archive: Path) -> dict[str, dict[str, Any]]:
    """stage name -> its archived record (finished stages only)."""
    out = {}
    for path in sorted(archive.glob("*.json")):
        record = json.loads(path.read_text())
        if isinstance(record, dict) and record.get("status") == "ok" and "stage" in record:
            out[record["stage"]] = record
    return out


def with_interval(metrics: dict[str, Any], name: str) -> str:
    value, ci = metrics.get(name), metrics.get(K.ci(name))
    if not isinstance(value, int | float):
        return "–"
    return f"{value:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if isinstance(ci, list) else "")


def decodings_table(metrics: tuple[str, ...]) -> Any:
    """A renderer: one row per evaluation stage (its setting, each metric with its interval), and the commit,
    CPU and updates each came from."""
    def render(archive: Path) -> str:
        found = records(archive)
        rows = [r for r in found.values() if "metrics" in r["result"]]
        if not rows:
            return "_No archived run yet: `make pipeline NAME=" + archive.name + "`._"
        head = "| setting | " + " | ".join(f"{m} [95% CI]" for m in metrics) + " | updates | commit | CPU |"
        lines = [head, "|---" * (len(metrics) + 4) + "|"]
        for r in rows:
            m, man = r["result"]["metrics"], r["manifest"]
            lines.append(f"| {r['result'].get('label') or r['stage']} | "
                         + " | ".join(with_interval(m, x) for x in metrics)
                         + f" | {man.get('updates') or '–'} | {(man.get('commit') or '?')[:10]}"
                         f"{'' if man.get('clean') else ' (dirty)'} | {man.get('cpu', '?')} |")
        return "\n".join(lines)
    return render
