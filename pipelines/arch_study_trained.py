"""The architecture study at a trained budget: the curve that fixes the budget, the design questions, the
stability question on a deeper model, and relative positions. Its runs go through `make study-trained`
(a worktree at a fixed commit, records committed as they land). Its tables join the docs once every run of
the study is archived: a table rendered while records still land would go stale with each commit."""

from __future__ import annotations

from pipelines.core import Pipeline, Stage

PIPELINE = Pipeline(
    "arch_study_trained", "the architecture study at a trained budget (beam 5 and greedy)",
    tuple(Stage(q, "study", (q, "--recipe", "trained")) for q in ("curve", "all", "depth", "relative_positions")),
)
