"""The architecture study at a trained budget: the curve that fixes the budget, the design questions, the
stability question on a deeper model, and relative positions. Its runs go through `make study-trained`
(a worktree at a fixed commit, records committed as they land). The curve's table is final; the questions'
tables join the docs once every run is archived (a table rendered while records still land would go stale
with each commit)."""

from __future__ import annotations

import json
from pathlib import Path

from pipelines.core import Pipeline, Stage, Table
from seqlab.analysis.study import TRAINING, load_records
from seqlab.analysis.study_tables import curve_table


def curve(archive: Path) -> str:
    """The curve run's validation losses and the budget they chose (seqlab.analysis.study_tables)."""
    return curve_table(load_records(archive, TRAINING))[0] or "_No archived curve yet._"


def baseline(archive: Path) -> str:
    """The README's headline: the trained baseline's first seed, both decodings (a record that never changes
    once archived, unlike the question tables while their runs land)."""
    rows = []
    for label in ("beam5", "greedy"):
        path = archive / f"baseline-seed0.{label}.json"
        if not path.is_file():
            continue
        r = json.loads(path.read_text())
        m, ci = r["metrics"], r["metrics"].get("bleu_ci") or [float("nan")] * 2
        rows.append(f"| baseline, seed 0 | {r['steps']:,} | {label} | {m['bleu']:.2f} [{ci[0]:.2f}, {ci[1]:.2f}] | "
                    f"{m['chrf']:.2f} | {r['training']['commit'][:10]} |")
    if not rows:
        return "_No archived run yet._"
    return "\n".join(["| model | updates | decoding | BLEU [95% CI] | chrF | commit |", "|---|---|---|---|---|---|",
                      *rows])


PIPELINE = Pipeline(
    "arch_study_trained", "the architecture study at a trained budget (beam 5 and greedy)",
    tuple(Stage(q, "study", (q, "--recipe", "trained")) for q in ("curve", "all", "depth", "relative_positions")),
    (Table("arch_study_trained_curve", curve, "docs/experiments/arch_study_trained.md"),
     Table("readme_trained_baseline", baseline, "README.md")),
)
