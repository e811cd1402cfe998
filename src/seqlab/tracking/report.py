"""The local report of every evaluation result on disk: the dashboard (seqlab.tracking.dashboard) of its
runs, the decoding sections below it, and a Markdown table for READMEs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from seqlab.checkpoint import run_dir_of
from seqlab.metrics import declarations as M
from seqlab.metrics import keys as K
from seqlab.metrics.significance import N_AR_FAST, N_BOOTSTRAP
from seqlab.tracking.dashboard import RunView, finite_metrics, page_data, render_page, run_id, thin, write_dashboard
from seqlab.tracking.decoding_sections import beam_curse_section, mbr_section
from seqlab.tracking.examples import example_section, test_set_of
from seqlab.tracking.results import OK, read_curves, variant_of
from seqlab.tracking.wandb import CSV_DIR

CURVE_KEYS = ("val/loss", "train/loss", "train/lr", "val/greedy_bleu")  # the training curves the page offers


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def flat_config(result: dict[str, Any]) -> dict[str, Any]:
    """The config of one result as flat keys: decoding.*, model.*, split, checkpoint run."""
    ckpt = result.get("checkpoint", {})
    flat = {"run": ckpt.get("run_name") or Path(str(result.get("setting", {}).get("ckpt", "?"))).name,
            "seed": ckpt.get("seed"), "split": result.get("split")}
    flat.update(flatten(result.get("decoding") or result.get("setting", {}).get("decoding", {}), "decoding."))
    flat.update({f"model.{k}": v for k, v in (ckpt.get("model") or {}).items()})
    return flat


def run_view(result: dict[str, Any], index: int) -> RunView:
    """One evaluation result as the dashboard shows it, with its training run's curves where they are on disk."""
    ckpt = result.get("checkpoint", {})
    config = flat_config(result)
    config.update({f"settings.{k}": v for k, v in flatten(result.get("settings") or {}).items()})
    if result.get("engine"):
        config["engine"] = result["engine"]
    metrics, intervals = finite_metrics(result.get("metrics") or {})
    path = ckpt.get("path")
    run_dir = run_dir_of(path) if path and Path(path).is_absolute() else None
    curves = read_curves(run_dir / CSV_DIR / "metrics.csv", CURVE_KEYS) if run_dir else {}
    seed = f"-seed{ckpt['seed']}" if ckpt.get("seed") is not None else ""
    return RunView(run_id(index), f"{ckpt.get('run_name') or config['run']}{seed}/{result.get('label', '?')}",
                   str(result.get("label", "")), str(result.get("status", "?")), test_set_of(result), config, metrics,
                   intervals, {k: thin(v) for k, v in curves.items() if v},
                   variant_of(result) if ckpt.get("seed") is not None else None, str(result.get("error", "")),
                   run_dir.as_uri() if run_dir else None,
                   json.dumps([ckpt.get("variant") or ckpt.get("run_name"), ckpt.get("model")], sort_keys=True))


def render(results: list[dict[str, Any]], title: str = "seqlab report", pairs: list[dict[str, Any]] | None = None,
           extra: str = "") -> str:
    """The dashboard page of every result (seqlab.tracking.dashboard), then the decoding sections (the
    beam-search curse, example outputs side by side, MBR's choices) and `extra` (inspections).

    pairs: the paired tests between runs of one test set (seqlab.analysis.pairs, keyed by run_view ids),
    which the report command computes.
    """
    return render_page(page_data(views(results), pairs or [], title), sections(results) + extra)


def views(results: list[dict[str, Any]]) -> list[RunView]:
    return [run_view(r, i) for i, r in enumerate(results)]


def sections(results: list[dict[str, Any]]) -> str:
    ok = [r for r in results if r.get("status") == OK and "metrics" in r]
    return beam_curse_section(ok) + example_section(ok) + mbr_section(ok)


def write_report(results: list[dict[str, Any]], path: Path, title: str = "seqlab report",
                 pairs: list[dict[str, Any]] | None = None, extra: str = "") -> Path:
    """The page at `path` and its data beside it (`path` with the suffix .json)."""
    return write_dashboard(views(results), pairs or [], path, title, sections(results) + extra)


def format_metric(metrics: dict[str, Any], name: str) -> str:
    """`25.50 [24.10, 26.90]`: the value and, where the evaluation computed one, its 95% interval."""
    value = metrics.get(name)
    if not isinstance(value, int | float):
        return ""
    ci = metrics.get(K.ci(name))
    return f"{value:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if isinstance(ci, list) and len(ci) == 2 else "")


# the statistics after the declared main metric columns (metrics.declarations.columns)
MARKDOWN_STATISTICS = (K.HYP_SEQ_LOGPROB, K.DISTINCT2, K.SAMPLE_DISTINCT2, K.SELF_BLEU, K.LENGTH_RATIO, K.SHORT_SHARE,
                       K.TOKENS_PER_S, K.GENERATE_SECONDS, K.MBR_SECONDS)


def markdown_table(results: list[dict[str, Any]], marks: dict[str, str] | None = None) -> str:
    """One row per finished setting (decoding label), the main metrics as columns (BLEU and chrF with their
    95% intervals), and with `marks` (result path -> mark) a column "BLEU vs greedy": for READMEs."""
    ok = sorted((r for r in results if r.get("status") == OK), key=lambda r: (r["decoding"]["method"] != "greedy",
                                                                             r["decoding"]["method"], r["label"]))
    shown = [m for m in (*M.columns(), *MARKDOWN_STATISTICS) if any(m in r["metrics"] for r in ok)]
    with_ci = M.columns()  # each with its interval where the evaluation computed one
    head = [f"{m} [95% CI]" if m in with_ci else m for m in shown] + (
        [f"BLEU vs greedy (p: bootstrap {N_BOOTSTRAP:,} / randomization {N_AR_FAST:,})"] if marks else [])
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
