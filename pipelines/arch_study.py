"""The architecture study at 300 updates (the short recipe): norm position and warm-up, tying, positions."""

from __future__ import annotations

from pathlib import Path

from seqlab.analysis.study import RECIPES, VARIANT_DESCRIPTIONS, Archived, load_records
from seqlab.analysis.study_questions import QUESTIONS, STUDY
from seqlab.analysis.study_stages import study_stages
from seqlab.metrics.seeds import summarize
from seqlab.pipeline.core import Pipeline, Table


def study_tables(archive: Path, label: str) -> str:
    """The design questions' tables, each by its own function, from the archive alone."""
    archived = Archived.load(archive, label)
    if not archived.decoded:
        return "_No archived run yet._"
    return "\n\n".join(QUESTIONS[q].numbers(archived)[0] for q in STUDY)


def headline(archive: Path) -> str:
    """The README's summary: each variant's validation loss and greedy BLEU, mean ± sd over its seeds."""
    runs = load_records(archive, "greedy")
    if not runs:
        return "_No archived run yet._"
    lines = ["| variant (300 updates) | seeds | val loss | greedy BLEU |", "|---|---|---|---|"]
    for v in dict.fromkeys(v for v, _ in sorted(runs, key=lambda k: (k[0] != "baseline", k))):
        rs = [r for (vv, _), r in sorted(runs.items()) if vv == v]
        val = summarize({r.seed: r.final_val_loss for r in rs})
        bleu = summarize({r.seed: r.metrics["bleu"] for r in rs})
        lines.append(f"| {v} ({VARIANT_DESCRIPTIONS.get(v, v)}) | {len(rs)} | {val.mean:.3f} ± {val.sd:.3f} | "
                     f"{bleu.mean:.2f} ± {bleu.sd:.2f} |")
    return "\n".join(lines)


PIPELINE = Pipeline(
    "arch_study", "the architecture study at 300 updates (7 variants x 3 seeds, greedy)",
    study_stages(list(STUDY), RECIPES["short"]),
    (Table("arch_study", lambda archive: study_tables(archive, "greedy"),
           "docs/experiments/arch_study.md"),
     Table("readme_arch_study", headline, "README.md")),
)
