"""The report as a dashboard: one self-contained HTML page (its data and script inlined, no network) and the
same data as JSON beside it, for evaluation sweeps and for the architecture study alike.

The page compares runs the way a W&B workspace does: a runs table (metrics with their 95% intervals
first, settings as compact labels, any config key addable as a column; sort, filter by text or key=value,
group by any key with mean and spread per group), two runs side by side (their paired tests, computed
in Python by seqlab.analysis.pairs and embedded; the examples where their outputs differ most; their
log-prob and length figures), and charts with one metric per axis and only where there are at least three
points: a metric against a setting's value per method, a metric per run, and the training curves,
selectable, with a variant's seeds as a band. The script is tracking/static/dashboard.js (package data).
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from seqlab.io import atomic_write_text
from seqlab.metrics import declarations as M
from seqlab.metrics import keys as K

SHOWN_METRICS = 6
# the statistics beside the quality metrics (metrics.declarations): after the main columns, after the others
STATISTICS = (K.HYP_SEQ_LOGPROB, K.LENGTH_RATIO)
MORE_STATISTICS = (K.REF_PPL, K.DISTINCT2, K.SAMPLE_DISTINCT2, K.SELF_BLEU, K.SHORT_SHARE, K.TOKENS_PER_S)


def table_metrics() -> tuple[str, ...]:
    """What the page offers, in this order, where any run has them: the declared main columns, two statistics,
    the other metrics, more statistics, the length buckets; the table starts with the first SHOWN_METRICS of
    them (the others are a "+ column" away), so that it fits a 1,400 px window."""
    return (*M.columns(), *STATISTICS, *M.further_columns(), *MORE_STATISTICS,
            *(K.bucket(m, label) for m in M.bucketed() for label, _, _ in K.LENGTH_BUCKETS))


def metric_names() -> dict[str, str]:
    """Column names: each metric's declared title, a length bucket's, e.g. "BLEU src > 64"."""
    return {**M.titles(), **{K.bucket(m, label): f"{name} src {K.bucket_title(label)}"
                             for m, name in M.bucketed().items() for label, _, _ in K.LENGTH_BUCKETS}}



# what "compare two runs" shows of each run's log-probs and lengths
FIGURE_METRICS = (K.HYP_SEQ_LOGPROB, K.HYP_TOKEN_LOGPROB, K.REF_SEQ_LOGPROB, K.REF_TOKEN_LOGPROB, K.HYP_LEN,
                  K.REF_LEN, K.HYP_TOKENS, K.LENGTH_RATIO, K.SHORT_SHARE, K.EMPTY_SHARE)
LOWER_STATISTICS = (K.REF_PPL, K.SELF_BLEU, K.SHORT_SHARE, K.EMPTY_SHARE)  # with the declared error scores
CURVE_POINTS = 200  # a training curve is thinned to at most this many points


@dataclass
class RunView:
    """One run as the dashboard shows it (an evaluation result, or a study record)."""

    id: str  # unique on the page
    name: str  # training run / decoding label
    label: str  # the decoding setting's label
    status: str  # "ok" or why not
    test_set: str  # runs with equal test_set were scored on the same examples
    config: dict[str, Any]  # flat keys: run, seed, split, decoding.*, model.*
    metrics: dict[str, float]
    intervals: dict[str, list[float]] = field(default_factory=dict)  # metric -> [low, high], 95%
    curves: dict[str, list[list[float]]] = field(default_factory=dict)  # training curve key -> [[step, value]]
    group: str | None = None  # runs that differ only in their training seed share it (mean +- sd)
    error: str = ""
    link: str | None = None  # the training it decodes (its folder's file URI; a study's run): one curve for all
    training: str | None = None  # the training variant apart from its seed: its runs' curves form one band


def run_id(index: int) -> str:
    """The page's id of the index-th run (what the paired tests name runs by)."""
    return f"r{index}"


def thin(points: list[tuple[int, float]], most: int = CURVE_POINTS) -> list[list[float]]:
    """At most `most` points of a curve, evenly spaced, the last one kept."""
    if len(points) <= most:
        return [[s, v] for s, v in points]
    step = len(points) / most
    kept = [points[int(i * step)] for i in range(most - 1)] + [points[-1]]
    return [[s, v] for s, v in kept]


def finite_metrics(metrics: dict[str, Any]) -> tuple[dict[str, float], dict[str, list[float]]]:
    """The numeric metrics (JSON has no NaN) and their intervals."""
    values = {k: float(v) for k, v in metrics.items()
              if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}
    intervals = {m: [float(metrics[K.ci(m)][0]), float(metrics[K.ci(m)][1])] for m in values
                 if isinstance(metrics.get(K.ci(m)), list) and len(metrics[K.ci(m)]) == 2}
    return values, intervals


def page_data(runs: list[RunView], pairs: list[dict[str, Any]], title: str) -> dict[str, Any]:
    """Everything the page shows, as JSON-ready data."""
    present = [m for m in table_metrics() if any(m in r.metrics for r in runs)]
    names = metric_names()
    rows, seen = [asdict(r) for r in runs], set()
    for row in rows:  # a training decoded many ways carries its curves once, on its first run
        if row["link"] in seen:
            row["curves"] = {}
        elif row["link"] is not None and row["curves"]:
            seen.add(row["link"])
    keys = sorted({k for r in runs for k in r.config})
    varying = [k for k in keys if len({json.dumps(r.config.get(k), sort_keys=True) for r in runs}) > 1]
    figures = [m for m in FIGURE_METRICS if any(m in r.metrics for r in runs)]
    return {"title": title, "metrics": present, "shown_metrics": present[:SHOWN_METRICS], "figure_metrics": figures,
            "lower_is_better": sorted({*LOWER_STATISTICS, *M.lower_keys()}),
            "metric_names": {m: names[m] for m in present if m in names},
            "config_keys": keys, "varying": varying,
            "runs": rows, "pairs": pairs}


def script() -> str:
    return resources.files("seqlab.tracking").joinpath("static/dashboard.js").read_text(encoding="utf-8")


def style() -> str:
    return resources.files("seqlab.tracking").joinpath("static/dashboard.css").read_text(encoding="utf-8")


def render_page(data: dict[str, Any], extra: str = "") -> str:
    """The HTML page: the data as an inline JSON block, the script and style inlined, `extra` sections
    (decoding sections, inspections) below the dashboard."""
    blob = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")  # no "</script>" inside the block
    failed = sum(r["status"] != "ok" for r in data["runs"])
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(data['title'])}</title>
<meta name="viewport" content="width=device-width"><style>{style()}</style></head><body>
<h1>{html.escape(data['title'])}</h1>
<p class="note">{len(data['runs'])} runs, {failed} failed. BLEU and chrF: sacreBLEU; ROUGE: rouge-score F1 with
stemming; log-probs in nats; [low, high]: 95% bootstrap interval. Click a column to sort, pick two runs to
compare them.</p>
<div id="app"></div>
<script type="application/json" id="report-data">{blob}</script>
<script>{script()}</script>
{extra}
</body></html>"""


def write_dashboard(runs: list[RunView], pairs: list[dict[str, Any]], path: Path, title: str,
                    extra: str = "") -> Path:
    """The page at `path` and its data at `path` with the suffix .json."""
    data = page_data(runs, pairs, title)
    atomic_write_text(path.with_suffix(".json"), json.dumps(data, indent=1))
    return atomic_write_text(path, render_page(data, extra))
