"""The architecture study's tables and figures, from its archive alone (seqlab.analysis.study).

A decoded question: one row per variant (mean +- sd over seeds and each seed's BLEU) and one per
comparison (the seed-level permutation p and the per-seed paired bootstrap on the test set). The depth
question is judged on training alone, by the rule fixed before its runs (`depth_fails`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from seqlab.analysis.compare import System, compare
from seqlab.analysis.study import (
    CURVE_TOLERANCE,
    VARIANT_DESCRIPTIONS,
    Archived,
    Record,
    Runs,
    curve_budget,
)
from seqlab.analysis.study_lengths import length_section
from seqlab.hardware import bf16_flags
from seqlab.metrics import keys as K
from seqlab.metrics.seeds import compare as compare_seeds
from seqlab.metrics.seeds import pooled_sd, summarize
from seqlab.tracking.results import DIVERGED


class Asked(Protocol):
    """What the tables and figures read of a question (seqlab.analysis.study_questions.Question, whose module
    imports this one)."""

    @property
    def title(self) -> str: ...
    @property
    def variants(self) -> list[str]: ...
    @property
    def pairs(self) -> list[tuple[str, str]]: ...
    @property
    def by_length(self) -> bool: ...
    @property
    def curves(self) -> Curves | None: ...
    @property
    def compared_on_test(self) -> bool: ...
    def runs(self) -> list[tuple[str, int]]: ...


TableFn = Callable[[Asked, Archived], tuple[str, dict[str, Any]]]  # a question's markdown and numbers
DEPTH_SD_FACTOR = 3.0  # post-LN "fails" above pre-LN's final validation loss by more than this x pooled seed sd


@dataclass(frozen=True)
class Curves:
    """How a question's own validation curves are drawn (`draw_curves`) and captioned on its page."""

    caption: str = "Validation loss of the question's runs, mean and range over seeds"
    panels: Callable[[list[str]], dict[str, list[str]]] | None = None  # title -> variants, a panel each


# the tests a comparison runs on the test set: BLEU's paired bootstrap per seed (sacreBLEU's, its default
# 1,000 resamples), what the verdicts read (seqlab.analysis.study_claims.verdict); chrF and ROUGE-L are shown
# as means, and `seqlab compare` runs every metric's tests on any two result folders
TESTED = (K.BLEU,)


def compared_table(q: Asked, archived: Archived) -> tuple[str, dict[str, Any]]:
    """The markdown table of a question compared on test-set decodings, and its numbers: a row per variant
    (mean +- sd over seeds, each seed's BLEU), a row per tested pair; a question `by_length` adds BLEU and
    chrF per source-length bucket and each pair's tests per bucket (seqlab.analysis.study_lengths)."""
    runs, refs = archived.decoded, archived.references
    seeds = {v: sorted(s for (vv, s) in runs if vv == v) for v in q.variants}
    present = [v for v in q.variants if seeds[v]]
    lines = [f"**{q.title}**", "",
             "| variant | params | seeds | val loss | BLEU (per seed) | chrF | ROUGE-L |",
             "|---|---|---|---|---|---|---|"]
    data: dict[str, Any] = {"variants": {}, "comparisons": []}
    for v in present:
        rs = [runs[(v, s)] for s in seeds[v]]
        val = summarize({r.seed: r.final_val_loss for r in rs})
        by_metric = {m: summarize({r.seed: r.metrics[m] for r in rs}) for m in (K.BLEU, K.CHRF, K.ROUGEL)}
        bleu_values = ", ".join(f"{x:.2f}" for x in by_metric[K.BLEU].values.values())
        lines.append(f"| {v} ({VARIANT_DESCRIPTIONS.get(v, v)}) | {rs[0].params / 1e6:.2f}M | {len(rs)} | "
                     f"{val.mean:.3f} ± {val.sd:.3f} | {by_metric[K.BLEU].mean:.2f} ± {by_metric[K.BLEU].sd:.2f} "
                     f"({bleu_values}) | {by_metric[K.CHRF].mean:.2f} ± {by_metric[K.CHRF].sd:.2f} | "
                     f"{by_metric[K.ROUGEL].mean:.2f} ± {by_metric[K.ROUGEL].sd:.2f} |")
        data["variants"][v] = {"params": rs[0].params, "val_loss": val.to_dict(),
                               **{m: s.to_dict() for m, s in by_metric.items()}}
    if q.pairs:
        lines += ["", "| comparison | Δ val loss | Δ BLEU | > seed spread | p (seeds, permutation) | "
                  "p (test set, paired bootstrap per seed) | Δ params |", "|---|---|---|---|---|---|---|"]
    for ref, other in q.pairs:
        common = sorted(set(seeds.get(ref, [])) & set(seeds.get(other, [])))
        if not common:
            continue
        row, entry = comparison_row(ref, other, common, runs, refs)
        lines.append(row)
        data["comparisons"].append(entry)
    if q.by_length:
        table, by_length = length_section({v: [runs[(v, s)] for s in seeds[v]] for v in present}, q.pairs, runs,
                                          refs, archived.source_tokens)
        if table:
            lines += ["", table]
            data["by_length"] = by_length
    return "\n".join(lines), data


def comparison_row(ref: str, other: str, common: list[int], runs: Runs, refs: list[str]) -> tuple[str, dict]:
    """One comparison: seed-level tests of BLEU and validation loss, and each seed's paired test set tests."""
    systems = [System(f"{v}-seed{s}", runs[(v, s)].hypotheses, [refs], origin=f"{v}-seed{s}", variant=v,
                      seed=s, group_label=v) for v in (ref, other) for s in common]
    report = compare(systems, n_ar=0, metrics=TESTED)
    p_test = {c.system: c.p_bootstrap for c in report.comparisons if c.metric == K.BLEU}
    bleu = compare_seeds(summarize({s: runs[(ref, s)].metrics[K.BLEU] for s in common}),
                         summarize({s: runs[(other, s)].metrics[K.BLEU] for s in common}))
    val = compare_seeds(summarize({s: runs[(ref, s)].final_val_loss for s in common}),
                        summarize({s: runs[(other, s)].final_val_loss for s in common}))
    per_seed = ", ".join(f"{p_test[f'{other}-seed{s}']:.3f}" for s in common)
    d_params = runs[(other, common[0])].params - runs[(ref, common[0])].params
    row = (f"| {other} − {ref} | {val.delta:+.3f}{' (> spread)' if val.exceeds_spread else ''} | "
           f"{bleu.delta:+.2f} | {'yes' if bleu.exceeds_spread else 'no'} | {bleu.p_permutation:.2f} | "
           f"{per_seed} | {d_params / 1e6:+.2f}M |")
    entry = {"reference": ref, "variant": other, "seeds": common, "bleu": bleu.to_dict(),
             "val_loss": val.to_dict(), "p_test_bleu": p_test, "delta_params": d_params,
             "tests": [{"base": c.base, "system": c.system, "metric": c.metric, "delta": c.delta,
                        "p_bootstrap": c.p_bootstrap, "p_ar": c.p_ar}
                       for c in report.comparisons]}
    return row, entry


def depth_fails(post: list[Record], pre: list[Record]) -> tuple[bool, str]:
    """The rule fixed before the depth runs: post-LN fails if any seed diverged (a non-finite loss), or if
    its mean final validation loss exceeds pre-LN's by more than DEPTH_SD_FACTOR x the pooled seed sd."""
    diverged = [r.seed for r in post if r.status == DIVERGED]
    if diverged:
        return True, f"diverged (seeds {diverged})"
    finite_pre = [r for r in pre if r.status != DIVERGED]
    if not finite_pre:
        return False, "pre-LN diverged too: no reference"
    a = summarize({r.seed: r.final_val_loss for r in finite_pre})
    b = summarize({r.seed: r.final_val_loss for r in post})
    margin = DEPTH_SD_FACTOR * pooled_sd(a, b)
    gap = b.mean - a.mean
    return gap > margin, f"{gap:+.3f} vs {DEPTH_SD_FACTOR:g} x sd = {margin:.3f}"


def depth_table(q: Asked, archived: Archived) -> tuple[str, dict[str, Any]]:
    """A question judged on training (the depth question): final validation loss per variant and the failure
    rule (`depth_fails`) for each (pre-LN, post-LN) pair."""
    runs = archived.training
    by_variant = {v: [runs[k] for k in sorted(runs) if k[0] == v] for v in q.variants}
    finite = [r.val_curve for rs in by_variant.values() for r in rs if r.status != DIVERGED]
    steps = common_steps(finite)[0] if finite else []  # a finite run without a curve leaves no shared step
    lines = [f"**{q.title}**", "",
             f"| variant | seeds | final val loss (per seed) | mean val loss at {' / '.join(f'{s:,}' for s in steps)} "
             "| diverged |", "|---|---|---|---|---|"]
    data: dict[str, Any] = {"variants": {}, "comparisons": [], "steps": steps}
    for v, rs in by_variant.items():
        if not rs:
            continue
        ok = [r for r in rs if r.status != DIVERGED]
        mean = sum(r.final_val_loss for r in ok) / len(ok) if ok else math.nan
        # the curve's mean at each step every finite run of this question validated at
        curve = [sum(dict(r.val_curve)[s] for r in ok) / len(ok) if ok else math.nan for s in steps]
        per_seed = ", ".join("diverged" if r.status == DIVERGED else f"{r.final_val_loss:.3f}" for r in rs)
        lines.append(f"| {v} | {len(rs)} | {mean:.3f} ({per_seed}) | {' / '.join(f'{x:.3f}' for x in curve)} "
                     f"| {sum(r.status == DIVERGED for r in rs)} |")
        data["variants"][v] = {"seeds": [r.seed for r in rs], "final_val_loss": [r.final_val_loss for r in rs],
                               "status": [r.status for r in rs], "mean_val_curve": list(zip(steps, curve, strict=True))}
    lines += ["", "| post-LN vs pre-LN | post-LN fails? | why |", "|---|---|---|"]
    for pre, post in q.pairs:
        if by_variant.get(pre) and by_variant.get(post):
            fails, why = depth_fails(by_variant[post], by_variant[pre])
            lines.append(f"| {post} vs {pre} | {'yes' if fails else 'no'} | {why} |")
            data["comparisons"].append({"pre": pre, "post": post, "fails": fails, "why": why})
    return "\n".join(lines), data


def curve_table(q: Asked, archived: Archived) -> tuple[str, dict[str, Any]]:
    """A question of one long run (the curve): its validation losses and the budget they choose."""
    rs = [r for (v, _), r in sorted(archived.training.items()) if v == q.variants[0]]
    if not rs:
        return "", {}
    curve = rs[0].val_curve
    budget = curve_budget(curve)
    lowest = min(loss for _, loss in curve)
    lines = [f"**{q.title}**", "",
             f"| update | val loss | within {CURVE_TOLERANCE} of the lowest |", "|---|---|---|"]
    lines += [f"| {s:,} | {loss:.3f} | {'yes' if loss <= lowest + CURVE_TOLERANCE else ''}"
              f"{' ← budget' if s == budget else ''} |" for s, loss in curve]
    return "\n".join(lines), {"curve": curve, "lowest": lowest, "budget": budget}


def machines_table(runs: Runs) -> tuple[str, dict[str, Any]]:
    """Which CPU trained which runs, and how fast. A study that outlives one sitting lands on whatever
    machine each sitting has; their bf16 kernels differ (AMX against AVX512-BF16), a source of variation
    between runs that the seed-level tests count as seed noise, so the reader should see where it enters."""
    by_cpu: dict[str, list[Record]] = {}
    for _, r in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        t = r.training or {}
        flags = bf16_flags(t.get("cpu_flags", []))
        by_cpu.setdefault(f"{t.get('cpu', '?')} ({', '.join(flags) or 'no bf16 flags'})", []).append(r)
    if not by_cpu:
        return "", {}
    lines = ["**The machines that trained the runs**", "",
             "| CPU | runs | training, updates per second (median) | which |", "|---|---|---|---|"]
    data = {}
    for cpu, rs in by_cpu.items():
        rates = [r.steps / r.training["wall_s"] for r in rs if (r.training or {}).get("wall_s")]
        rate = statistics.median(rates) if rates else float("nan")
        seeds: dict[str, list[int]] = {}
        for r in rs:
            seeds.setdefault(r.variant, []).append(r.seed)
        which = "; ".join(f"{v} {', '.join(map(str, sorted(ss)))}" for v, ss in seeds.items())
        lines.append(f"| {cpu} | {len(rs)} | {rate:.2f} | {which} |")
        data[cpu] = {"runs": [r.name for r in rs], "updates_per_s": rate}
    return "\n".join(lines), data


def common_steps(curves: list[list[tuple[int, float]]]) -> tuple[list[int], list[tuple[float, ...]]]:
    """The steps every seed's curve has, and the seeds' values at each: a run stopped and resumed also
    validated where it stopped, a step the other seeds lack."""
    shared = set.intersection(*({s for s, _ in c} for c in curves))
    steps = sorted(shared)
    by_step = [dict(c) for c in curves]
    return steps, [tuple(c[s] for c in by_step) for s in steps]


def val_curves_png(runs: Runs, out: Path, panels: dict[str, list[str]] | None = None) -> Path:
    """Validation loss against steps, mean over seeds per variant (shaded: min to max over seeds); `panels`
    (title -> variants) draws one panel each, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = panels or {"": sorted({v for v, _ in runs})}
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 4), sharey=True, squeeze=False)
    for ax, (title, variants) in zip(axes[0], panels.items(), strict=True):
        for v in variants:
            curves = [runs[k].val_curve for k in sorted(runs) if k[0] == v and runs[k].val_curve]
            if not curves:
                continue
            steps, losses = common_steps(curves)
            ax.plot(steps, [sum(x) / len(x) for x in losses], marker="o", ms=3, label=f"{v} ({len(curves)} seeds)")
            ax.fill_between(steps, [min(x) for x in losses], [max(x) for x in losses], alpha=0.15)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("validation loss (label-smoothed)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def question_png(question: str) -> str:
    """The file name of a question's own validation curves in its archive."""
    return f"val_loss.{question}.png"


def by_learning_rate(variants: list[str]) -> dict[str, list[str]]:
    """A panel per learning rate (the depth question's variants end in `_lr<rate>`): post- and pre-LN, with
    and without warm-up, side by side at the same rate."""
    rates = sorted({v.rsplit("_lr", 1)[1] for v in variants}, key=float)
    return {f"6+6 layers, lr {lr}": [v for v in variants if v.endswith(f"_lr{lr}")] for lr in rates}


def draw_curves(archive: Path, questions: dict[str, Asked], label: str, trained: Runs) -> list[Path]:
    """The validation curves the study's page shows: one figure over every variant of the questions compared
    on `label`'s decodings (val_loss.png for greedy, else val_loss.<label>.png), and each complete question
    with its own `curves` in its own figure (`question_png`)."""
    drawn = []
    plotted = {v for q in questions.values() if q.compared_on_test for v in q.variants}
    shared = {k: r for k, r in trained.items() if k[0] in plotted}
    if shared:
        name = "val_loss.png" if label == "greedy" else f"val_loss.{label}.png"
        drawn.append(val_curves_png(shared, archive / name))
    for name, q in questions.items():
        own = {k: r for k, r in trained.items() if k[0] in q.variants}
        if q.curves is not None and own and all(k in own for k in q.runs()):
            panels = q.curves.panels(q.variants) if q.curves.panels else None
            drawn.append(val_curves_png(own, archive / question_png(name), panels))
    return drawn
