"""The architecture study at 300 updates (the short recipe): norm position and warm-up, tying, positions."""

from __future__ import annotations

from pathlib import Path

from pipelines.core import Pipeline, Stage, Table


def study_tables(archive: Path, questions: tuple[str, ...], label: str) -> str:
    """The study's own tables, from its archive alone (seqlab.analysis.study_tables)."""
    from seqlab.analysis.study import load_records, load_references
    from seqlab.analysis.study_tables import question_table

    runs = load_records(archive, label)
    if not runs:
        return "_No archived run yet._"
    refs = load_references(archive)
    return "\n\n".join(question_table(q, runs, refs)[0] for q in questions)


PIPELINE = Pipeline(
    "arch_study", "the architecture study at 300 updates (7 variants x 3 seeds, greedy)",
    (Stage("runs", "study", ("all", "--recipe", "short")),),
    (Table("arch_study", lambda archive: study_tables(archive, ("norm_warmup", "tying", "positions"), "greedy"),
           "docs/experiments/arch_study.md"),),
)
