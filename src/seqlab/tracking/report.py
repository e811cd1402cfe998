"""A self-contained HTML report (PNG plots inlined) of every evaluation result on disk.

Results that differ only in their training seed are also shown together: mean +- sd
over seeds with each seed's value, and their validation-loss curves per variant.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from seqlab.checkpoint import run_dir_of
from seqlab.io import atomic_write_text
from seqlab.metrics import keys as K
from seqlab.metrics.seeds import summarize
from seqlab.tracking.decoding_sections import beam_curse_section, mbr_section
from seqlab.tracking.examples import example_section
from seqlab.tracking.figures import png
from seqlab.tracking.results import OK, read_curves, read_val_curve, variant_of
from seqlab.tracking.wandb import CSV_DIR

VARIANT_KEYS = ("norm_position", "positions", "tie_embeddings", "scale_embedding", "d_model", "encoder_layers")
SHOWN_METRICS = (K.BLEU, K.CHRF, K.ROUGE1, K.ROUGE2, K.ROUGEL, K.HYP_SEQ_LOGPROB, K.REF_PPL, K.DISTINCT2,
                 K.SELF_BLEU, K.LENGTH_RATIO, K.TOKENS_PER_S)


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def describe(result: dict[str, Any]) -> dict[str, Any]:
    """The config of one result as flat keys: decoding.*, model.*, split, checkpoint run."""
    ckpt = result.get("checkpoint", {})
    flat = {"run": ckpt.get("run_name") or Path(str(result.get("setting", {}).get("ckpt", "?"))).name,
            "seed": ckpt.get("seed"), "split": result.get("split")}
    flat.update(flatten(result.get("decoding") or result.get("setting", {}).get("decoding", {}), "decoding."))
    flat.update({f"model.{k}": v for k, v in (ckpt.get("model") or {}).items() if k in VARIANT_KEYS})
    return flat


def varying_keys(rows: list[dict[str, Any]]) -> list[str]:
    """Config keys whose values differ between runs: what tells the runs apart."""
    keys = sorted({k for r in rows for k in r})
    return [k for k in keys if len({repr(r.get(k)) for r in rows}) > 1]


def variant_name(result: dict[str, Any]) -> str:
    model = result.get("checkpoint", {}).get("model") or {}
    return f"{model.get('norm_position', '?')}-LN/{model.get('positions', '?')}/tie={model.get('tie_embeddings', '?')}"


def _bars(ax: Any, labels: list[str], series: dict[str, list[float]], ylabel: str) -> None:
    n = max(len(series), 1)
    width = 0.8 / n
    for i, (name, values) in enumerate(series.items()):
        ax.bar([x + i * width for x in range(len(labels))], values, width=width, label=name)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(labels))])
    ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    if n > 1:
        ax.legend(fontsize=8)


def plots(ok: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(title, base64 PNG) for each plot the results support."""
    out: list[tuple[str, str]] = []
    if not ok:
        return out
    by_label = sorted(ok, key=lambda r: (r["decoding"]["method"] != "greedy", r["decoding"]["method"], r["label"]))
    labels = [f"{r['label']} [{r.get('checkpoint', {}).get('run_name', '')}]" for r in by_label]
    quality = [m for m in (K.BLEU, K.CHRF, K.ROUGE1, K.ROUGEL) if all(m in r["metrics"] for r in by_label)]
    series = {m: [r["metrics"][m] for r in by_label] for m in quality}
    out.append(("Metric per decoding method",
                png(lambda ax: _bars(ax, labels, series, "score"), width=max(7, len(labels) * 0.5))))

    temps = sorted((r for r in ok if r["decoding"]["method"] == "sample" and r["decoding"].get("temperature")
                    and K.DISTINCT2 in r["metrics"]), key=lambda r: r["decoding"]["temperature"])
    if temps:
        def draw_tradeoff(ax: Any) -> None:
            xs = [r["metrics"].get(K.SAMPLE_DISTINCT2, r["metrics"][K.DISTINCT2]) for r in temps]
            ys = [r["metrics"][K.BLEU] for r in temps]
            ax.plot(xs, ys, "o-")
            for r, x, y in zip(temps, xs, ys, strict=True):
                ax.annotate(r["label"], (x, y), fontsize=7)
            ax.set_xlabel("distinct-2 (among samples of a source)")
            ax.set_ylabel("BLEU")
        out.append(("BLEU against distinct-2 across sampling settings", png(draw_tradeoff)))

    searches = [r for r in by_label if r["decoding"]["method"] in ("greedy", "beam")]
    if searches:
        out.append(("Mean sequence log-prob: beam vs greedy", png(lambda ax: _bars(
            ax, [f"{r['label']} [{r.get('checkpoint', {}).get('run_name', '')}]" for r in searches],
            {"hypothesis log-prob / sequence": [r["metrics"][K.HYP_SEQ_LOGPROB] for r in searches]}, "nats"))))

    variants = sorted({variant_name(r) for r in ok})
    if len(variants) > 1:
        methods = sorted({r["label"] for r in searches})
        table = {m: [next((r["metrics"][K.BLEU] for r in searches if r["label"] == m and variant_name(r) == v),
                          0.0) for v in variants] for m in methods}
        out.append(("Architecture variants: BLEU by decoding", png(lambda ax: _bars(ax, variants, table, "BLEU"),
                                                                     width=max(7, len(variants) * 0.8))))
    return out


def format_metric(metrics: dict[str, Any], name: str) -> str:
    """`25.50 [24.10, 26.90]`: the value and, where the evaluation computed one, its 95% interval."""
    value = metrics.get(name)
    if not isinstance(value, int | float):
        return ""
    ci = metrics.get(K.ci(name))
    return f"{value:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if isinstance(ci, list) and len(ci) == 2 else "")


def render(results: list[dict[str, Any]], title: str = "seqlab report", marks: dict[str, str] | None = None,
           extra: str = "") -> str:
    """The HTML page: a table of every run (what differs, metrics, status, its training run) and the plots.

    marks: result path -> a significance mark for its BLEU against its test set's baseline (the
    report command computes them with seqlab.analysis.compare).
    """
    marks = marks or {}
    rows = [describe(r) for r in results]
    keys = varying_keys(rows) or ["run"]
    shown = [m for m in SHOWN_METRICS if any(m in r.get("metrics", {}) for r in results)]
    head = "".join(f"<th>{html.escape(k)}</th>" for k in ["status", "setting", *keys, *shown, "vs baseline",
                                                           "training run", "error"])
    body = []
    for result, row in zip(results, rows, strict=True):
        metrics = result.get("metrics", {})
        cells = [html.escape(str(c)) for c in [result.get("status", "?"), result.get("label", "")]
                 + [row.get(k, "") for k in keys]]
        cells += [html.escape(format_metric(metrics, m)) for m in shown]
        cells.append(html.escape(marks.get(str(result.get("_path")), "")))
        path = result.get("checkpoint", {}).get("path")
        cells.append(f"<a href='{run_dir_of(path).as_uri()}'>{html.escape(run_dir_of(path).name)}</a>"
                     if path and Path(path).is_absolute() else "")
        cells.append(html.escape(str(result.get("error", ""))))
        cls = "failed" if result.get("status") != OK else ""
        body.append(f"<tr class='{cls}'>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    figures = "".join(f"<h2>{html.escape(t)}</h2><img src='data:image/png;base64,{png}'/>"
                      for t, png in plots([r for r in results if r.get("status") == OK and "metrics" in r]))
    figures += seed_section([r for r in results if r.get("status") == OK and "metrics" in r])
    figures += training_section(results)
    figures += beam_curse_section([r for r in results if r.get("status") == OK and "metrics" in r])
    figures += example_section([r for r in results if r.get("status") == OK])
    figures += mbr_section([r for r in results if r.get("status") == OK])
    figures += extra  # e.g. attention and decoding inspections, built by the report command
    failed = sum(r.get("status") != OK for r in results)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:3px 6px}}tr.failed{{background:#fdd}}
tr.chosen{{background:#dfd}}img{{max-width:100%}}</style></head>
<body><h1>{html.escape(title)}</h1><p>{len(results)} runs, {failed} failed. Columns: the settings that differ
between runs, then metrics (BLEU/chrF: sacreBLEU; ROUGE: rouge-score F1 with stemming; log-probs in nats),
with 95% bootstrap intervals in brackets; "vs baseline": BLEU against the first setting evaluated on the same
test set (paired bootstrap and approximate randomization, * = both p &lt; 0.05).</p>
<table><tr>{head}</tr>{''.join(body)}</table>{figures}</body></html>"""


def write_report(results: list[dict[str, Any]], path: Path, title: str = "seqlab report",
                 marks: dict[str, str] | None = None, extra: str = "") -> Path:
    return atomic_write_text(path, render(results, title, marks, extra))


MARKDOWN_METRICS = (K.BLEU, K.CHRF, K.ROUGE1, K.ROUGEL, K.HYP_SEQ_LOGPROB, K.DISTINCT2, K.SAMPLE_DISTINCT2, K.SELF_BLEU,
                    K.LENGTH_RATIO, K.SHORT_SHARE, K.TOKENS_PER_S, K.GENERATE_SECONDS, K.MBR_SECONDS)


def markdown_table(results: list[dict[str, Any]], marks: dict[str, str] | None = None) -> str:
    """One row per finished setting (decoding label), the main metrics as columns (BLEU and chrF with their
    95% intervals), and with `marks` (result path -> mark) a column "BLEU vs greedy": for READMEs."""
    ok = sorted((r for r in results if r.get("status") == OK), key=lambda r: (r["decoding"]["method"] != "greedy",
                                                                             r["decoding"]["method"], r["label"]))
    shown = [m for m in MARKDOWN_METRICS if any(m in r["metrics"] for r in ok)]
    with_ci = (K.BLEU, K.CHRF)
    head = [f"{m} [95% CI]" if m in with_ci else m for m in shown] + (["BLEU vs greedy"] if marks else [])
    lines = ["| setting | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for r in ok:
        cells = [(format_metric(r["metrics"], m) if m in with_ci else f"{r['metrics'][m]:.2f}")
                 if m in r["metrics"] else "" for m in shown]
        if marks:
            cells.append(marks.get(str(r.get("_path")), ""))
        lines.append(f"| {r['label']} | " + " | ".join(cells) + " |")
    failed = [r for r in results if r.get("status") != OK]
    lines += [f"| {r.get('label')} | failed: {r.get('error', '')} |" for r in failed]
    return "\n".join(lines)


def seed_groups(ok: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Results grouped by everything but the training seed; only groups with several seeds."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in ok:
        if r.get("checkpoint", {}).get("seed") is not None:
            groups.setdefault(variant_of(r), []).append(r)
    return {k: v for k, v in groups.items() if len({r["checkpoint"]["seed"] for r in v}) > 1}


def val_curve(result: dict[str, Any]) -> list[tuple[int, float]]:
    """The validation-loss curve of the training run behind a result, from its CSV log (empty if none)."""
    return read_val_curve(run_dir_of(str(result.get("checkpoint", {}).get("path", ""))) / "csv" / "metrics.csv")


def seed_section(ok: list[dict[str, Any]]) -> str:
    """HTML: per variant, mean +- sd over seeds (each seed's value), and validation-loss curves per variant."""
    groups = seed_groups(ok)
    if not groups:
        return ""
    metrics = [m for m in (K.BLEU, K.CHRF, K.ROUGEL, K.HYP_SEQ_LOGPROB) if all(m in r["metrics"] for g in
                                                                             groups.values() for r in g)]
    head = "".join(f"<th>{html.escape(m)}</th>" for m in ["variant", "seeds", *metrics])
    rows, curves = [], {}
    for group in groups.values():
        name = f"{group[0]['checkpoint'].get('run_name')}/{group[0].get('label')}"
        cells = [name, str(len(group))]
        for m in metrics:
            s = summarize({r["checkpoint"]["seed"]: r["metrics"][m] for r in group})
            cells.append(f"{s.mean:.2f} ± {s.sd:.2f} (" + ", ".join(f"{v:.2f}" for v in s.values.values()) + ")")
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
        found = [c for c in (val_curve(r) for r in group) if c]
        if found:
            curves[str(group[0]["checkpoint"].get("run_name"))] = found
    out = f"<h2>Over seeds (mean ± sd, each seed's value)</h2><table><tr>{head}</tr>{''.join(rows)}</table>"
    if curves:
        def draw(ax: Any) -> None:
            for name, runs in sorted(curves.items()):
                for i, curve in enumerate(runs):
                    ax.plot([s for s, _ in curve], [v for _, v in curve], color=f"C{sorted(curves).index(name)}",
                            alpha=0.7, label=name if i == 0 else None)
            ax.set_xlabel("step")
            ax.set_ylabel("validation loss")
            ax.legend(fontsize=7)
        out += ("<h2>Validation loss per variant (one line per seed)</h2>"
                f"<img src='data:image/png;base64,{png(draw)}'/>")
    return out


CURVES = (("train/loss", "training loss"), ("val/loss", "validation loss"), ("train/lr", "learning rate"),
          ("val/greedy_bleu", "quick greedy BLEU (validation)"))


def training_section(results: list[dict[str, Any]]) -> str:
    """HTML: loss, learning rate and quick BLEU against steps for every training run behind the results,
    read from each run's local metric history; the runs of one sweep folder are overlaid in one figure."""
    runs: dict[Path, dict[str, list[tuple[int, float]]]] = {}
    for r in results:
        path = r.get("checkpoint", {}).get("path")
        if path and run_dir_of(path) not in runs:
            curves = read_curves(run_dir_of(path) / CSV_DIR / "metrics.csv", tuple(k for k, _ in CURVES))
            if any(curves.values()):
                runs[run_dir_of(path)] = curves
    groups: dict[Path, list[Path]] = {}
    for run_dir in sorted(runs):
        groups.setdefault(run_dir.parent, []).append(run_dir)
    out = ""
    for folder, members in groups.items():
        def draw(axes: Any, members: list[Path] = members) -> None:
            for ax, (key, title) in zip(axes.flat, CURVES, strict=True):
                for i, run_dir in enumerate(members):
                    points = runs[run_dir][key]
                    if points:
                        ax.plot([p for p, _ in points], [v for _, v in points], color=f"C{i % 10}",
                                label=run_dir.name, marker="." if len(points) < 30 else None)
                if not any(runs[run_dir][key] for run_dir in members):
                    ax.text(0.5, 0.5, f"{key} not logged", ha="center", va="center", transform=ax.transAxes)
                ax.set_title(title, fontsize=9)
                ax.set_xlabel("step", fontsize=8)
            axes.flat[1].legend(fontsize=6)
        out += (f"<h2>Training curves: {html.escape(str(folder))} ({len(members)} runs)</h2>"
                f"<img src='data:image/png;base64,{png(draw, width=9, height=6, grid=(2, 2))}'/>")
    return out
