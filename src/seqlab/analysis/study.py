"""The architecture study's variants and tables.

`seqlab study` (seqlab.app.study) trains every variant of a question with several seeds and
evaluates each run; this module archives what a conclusion needs (per run: test
metrics, the validation-loss curve, the parameter count and the hypotheses; no
checkpoints) into a folder small enough to keep in the repository, and turns the
archive into one table per question: mean +- sd over seeds, each seed's value, the
difference to the question's reference variant with its seed-level test
(seqlab.metrics.seeds) and the per-seed paired bootstrap p-values on the test set
(seqlab.analysis.compare). `--from-archive` rebuilds the tables from the archive alone.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqlab.analysis.compare import METRICS, System, compare
from seqlab.io import atomic_write_text
from seqlab.metrics import keys as K
from seqlab.metrics.seeds import compare as compare_seeds
from seqlab.metrics.seeds import summarize
from seqlab.model import ModelConfig
from seqlab.model.params import analytic_counts
from seqlab.tracking.results import HYPOTHESES_FILE, METRICS_FILE, OK, read_val_curve

RUN = re.compile(r"^(?P<variant>.+)-seed(?P<seed>\d+)$")
REFERENCES = "test.references.txt.gz"

# variant -> its training overrides (the baseline: the experiment's default model); every question's
# variants come from here, for the runs (seqlab.app.study) and for the tables
VARIANTS: dict[str, tuple[str, ...]] = {
    "baseline": (),
    "post_nowarmup": ("optim.warmup_steps=0",),
    "pre": ("model.norm_position=pre",),
    "pre_nowarmup": ("model.norm_position=pre", "optim.warmup_steps=0"),
    "tie_none": ("model.tie_embeddings=none",),
    "tie_decoder": ("model.tie_embeddings=decoder",),
    "learned_positions": ("model.positions=learned",),
}
# question -> (title, variants in table order, (reference, variant) pairs to test)
QUESTIONS: dict[str, tuple[str, list[str], list[tuple[str, str]]]] = {
    "norm_warmup": ("Post-LN vs pre-LN, with and without warm-up",
                    ["baseline", "post_nowarmup", "pre", "pre_nowarmup"],
                    [("baseline", "post_nowarmup"), ("pre", "pre_nowarmup"), ("baseline", "pre"),
                     ("post_nowarmup", "pre_nowarmup")]),
    "tying": ("Tied embeddings: none / decoder / all", ["baseline", "tie_decoder", "tie_none"],
              [("baseline", "tie_decoder"), ("baseline", "tie_none")]),
    "positions": ("Sinusoidal vs learned positions", ["baseline", "learned_positions"],
                  [("baseline", "learned_positions")]),
}
DESCRIBE = {
    "baseline": "post-LN, warm-up, sinusoidal, tie all", "post_nowarmup": "post-LN, no warm-up",
    "pre": "pre-LN, warm-up", "pre_nowarmup": "pre-LN, no warm-up", "tie_decoder": "tie decoder in/out only",
    "tie_none": "no tying", "learned_positions": "learned positions",
}
# the grid (`seqlab study --grid`, `make sweep-arch`): every combination of these
GRID: dict[str, tuple[str, ...]] = {"model.norm_position": ("pre", "post"),
                                    "model.positions": ("sinusoidal", "learned"),
                                    "model.tie_embeddings": ("none", "decoder", "all")}


@dataclass
class Run:
    """One archived run: a variant trained with one seed, evaluated on the test split."""

    variant: str
    seed: int
    metrics: dict[str, Any]
    val_curve: list[tuple[int, float]]
    params: int
    steps: int
    hypotheses: list[str]

    @property
    def final_val_loss(self) -> float:
        return self.val_curve[-1][1] if self.val_curve else float("nan")


def collect(study: Path, archive: Path) -> list[str]:
    """Copy every finished run's essentials from the study folder into the archive; returns their names."""
    archive.mkdir(parents=True, exist_ok=True)
    names = []
    for metrics_path in sorted(study.glob(f"results/*/*/{METRICS_FILE}")):
        match = RUN.match(metrics_path.parent.parent.name)
        payload = json.loads(metrics_path.read_text())
        if not match or payload.get("status") != OK:
            continue
        records = [json.loads(line) for line in (metrics_path.parent / HYPOTHESES_FILE).read_text().splitlines()]
        name = metrics_path.parent.parent.name
        model = ModelConfig.from_dict(payload["checkpoint"]["model"])
        entry = {"variant": match["variant"], "seed": int(match["seed"]), "label": payload["label"],
                 "metrics": {k: v for k, v in payload["metrics"].items() if not k.endswith("signature")},
                 "val_curve": read_val_curve(study / "runs" / name / "csv" / "metrics.csv"),
                 "params": analytic_counts(model).total, "steps": payload["checkpoint"]["step"],
                 "model": payload["checkpoint"]["model"]}
        atomic_write_text(archive / f"{name}.json", json.dumps(entry, indent=1))
        (archive / f"{name}.hyps.txt.gz").write_bytes(gzip.compress(
            "".join(r["hypothesis"] + "\n" for r in records).encode(), mtime=0))
        refs = "".join(r["reference"] + "\n" for r in records).encode()
        ref_path = archive / REFERENCES
        if ref_path.exists() and gzip.decompress(ref_path.read_bytes()) != refs:
            raise SystemExit(f"{metrics_path}: evaluated on different references than {ref_path}")
        ref_path.write_bytes(gzip.compress(refs, mtime=0))
        names.append(name)
    return names


def load_archive(archive: Path) -> tuple[dict[tuple[str, int], Run], list[str]]:
    runs = {}
    for path in sorted(archive.glob("*.json")):
        if path.name == "summary.json":
            continue
        e = json.loads(path.read_text())
        hyps = gzip.decompress(path.with_name(path.name[:-5] + ".hyps.txt.gz").read_bytes()).decode()
        runs[(e["variant"], e["seed"])] = Run(e["variant"], e["seed"], e["metrics"],
                                              [tuple(x) for x in e["val_curve"]], e["params"], e["steps"],
                                              hyps.rstrip("\n").split("\n"))
    refs = gzip.decompress((archive / REFERENCES).read_bytes()).decode().rstrip("\n").split("\n")
    return runs, refs


def question_table(question: str, runs: dict[tuple[str, int], Run], refs: list[str]) -> tuple[str, dict[str, Any]]:
    """The markdown table of one question and its numbers."""
    title, variants, pairs = QUESTIONS[question]
    seeds = {v: sorted(s for (vv, s) in runs if vv == v) for v in variants}
    present = [v for v in variants if seeds[v]]
    lines = [f"**{title}**", "",
             "| variant | params | seeds | val loss | BLEU (per seed) | chrF | ROUGE-L |",
             "|---|---|---|---|---|---|---|"]
    data: dict[str, Any] = {"variants": {}, "comparisons": []}
    for v in present:
        rs = [runs[(v, s)] for s in seeds[v]]
        val = summarize({r.seed: r.final_val_loss for r in rs})
        by_metric = {m: summarize({r.seed: r.metrics[m] for r in rs}) for m in (K.BLEU, K.CHRF, K.ROUGEL)}
        bleu_values = ", ".join(f"{x:.2f}" for x in by_metric[K.BLEU].values.values())
        lines.append(f"| {v} ({DESCRIBE.get(v, v)}) | {rs[0].params / 1e6:.2f}M | {len(rs)} | "
                     f"{val.mean:.3f} ± {val.sd:.3f} | {by_metric[K.BLEU].mean:.2f} ± {by_metric[K.BLEU].sd:.2f} "
                     f"({bleu_values}) | {by_metric[K.CHRF].mean:.2f} ± {by_metric[K.CHRF].sd:.2f} | "
                     f"{by_metric[K.ROUGEL].mean:.2f} ± {by_metric[K.ROUGEL].sd:.2f} |")
        data["variants"][v] = {"params": rs[0].params, "val_loss": val.to_dict(),
                               **{m: s.to_dict() for m, s in by_metric.items()}}
    lines += ["", "| comparison | Δ val loss | Δ BLEU | > seed spread | p (seeds, permutation) | "
              "p (test set, paired bootstrap per seed) | Δ params |", "|---|---|---|---|---|---|---|"]
    for ref, other in pairs:
        common = sorted(set(seeds.get(ref, [])) & set(seeds.get(other, [])))
        if not common:
            continue
        systems = [System(f"{v}-seed{s}", runs[(v, s)].hypotheses, [refs], origin=f"{v}-seed{s}", variant=v,
                          seed=s, group_label=v) for v in (ref, other) for s in common]
        report = compare(systems, n_ar=1000)
        p_test = {c.system: c.p_bootstrap for c in report.comparisons if c.metric == K.BLEU}
        bleu = compare_seeds(summarize({s: runs[(ref, s)].metrics[K.BLEU] for s in common}),
                             summarize({s: runs[(other, s)].metrics[K.BLEU] for s in common}))
        val = compare_seeds(summarize({s: runs[(ref, s)].final_val_loss for s in common}),
                            summarize({s: runs[(other, s)].final_val_loss for s in common}))
        per_seed = ", ".join(f"{p_test[f'{other}-seed{s}']:.3f}" for s in common)
        d_params = runs[(other, common[0])].params - runs[(ref, common[0])].params
        lines.append(f"| {other} − {ref} | {val.delta:+.3f}{' (> spread)' if val.exceeds_spread else ''} | "
                     f"{bleu.delta:+.2f} | {'yes' if bleu.exceeds_spread else 'no'} | {bleu.p_permutation:.2f} | "
                     f"{per_seed} | {d_params / 1e6:+.2f}M |")
        data["comparisons"].append({"reference": ref, "variant": other, "seeds": common, "bleu": bleu.to_dict(),
                                    "val_loss": val.to_dict(), "p_test_bleu": p_test, "delta_params": d_params,
                                    "tests": [{"base": c.base, "system": c.system, "metric": c.metric,
                                               "delta": c.delta, "p_bootstrap": c.p_bootstrap, "p_ar": c.p_ar}
                                              for c in report.comparisons if c.metric in METRICS]})
    return "\n".join(lines), data


def val_curves_png(runs: dict[tuple[str, int], Run], out: Path) -> Path:
    """Validation loss against steps, mean over seeds per variant (shaded: min to max over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for v in sorted({v for v, _ in runs}):
        curves = [runs[k].val_curve for k in sorted(runs) if k[0] == v and runs[k].val_curve]
        steps = [s for s, _ in curves[0]]
        if not all([s for s, _ in c] == steps for c in curves):
            continue
        losses = list(zip(*[[loss for _, loss in c] for c in curves], strict=True))
        ax.plot(steps, [sum(x) / len(x) for x in losses], marker="o", ms=3, label=f"{v} ({len(curves)} seeds)")
        ax.fill_between(steps, [min(x) for x in losses], [max(x) for x in losses], alpha=0.15)
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (label-smoothed)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
