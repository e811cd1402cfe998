"""The architecture study's dashboard, from its archive alone: the same page as `seqlab report`
(seqlab.tracking.dashboard), one run per (variant, seed, decoding) record, with the paired tests between them
(seqlab.analysis.pairs) and each training's validation curve, the seeds of a variant drawn as a band."""

from __future__ import annotations

from pathlib import Path

from seqlab.analysis.compare import System
from seqlab.analysis.pairs import pair_tests
from seqlab.analysis.study import VARIANT_DESCRIPTIONS, Record, load_records, load_references
from seqlab.tracking.dashboard import RunView, finite_metrics, run_id, thin, write_dashboard
from seqlab.tracking.results import OK

TEST_SET = "study test split"  # every record decodes the same test split


def record_view(record: Record, index: int) -> RunView:
    metrics, intervals = finite_metrics(record.metrics)
    config = {"run": record.variant, "seed": record.seed, "decoding": record.label, "updates": record.steps,
              "params": record.params, **{f"model.{k}": v for k, v in record.model.items()}}
    return RunView(run_id(index), f"{record.name}/{record.label}", record.label, record.status, TEST_SET, config,
                   metrics, intervals, {"val/loss": thin(record.val_curve)} if record.val_curve else {},
                   group=f"{record.variant}/{record.label}", training=record.variant, link=record.name,
                   error="" if record.status == OK else "diverged (a non-finite loss)")


def write_study_report(archive: Path, labels: list[str], out: Path, title: str) -> Path | None:
    """The dashboard of every decoded record of `labels` (the reported one first) at `out`; None when the
    archive has none yet."""
    records = [r for label in labels for _, r in sorted(load_records(archive, label).items())]
    if not records:
        return None
    refs = load_references(archive)
    views = [record_view(r, i) for i, r in enumerate(records)]
    for view, record in zip(views, records, strict=True):
        view.config["description"] = VARIANT_DESCRIPTIONS.get(record.variant, record.variant)
    decoded = [(i, r) for i, r in enumerate(records) if r.hypotheses]
    pairs = []
    if len(decoded) > 1:
        systems = [System(run_id(i), r.hypotheses, [refs], origin=f"{r.name}.{r.label}") for i, r in decoded]
        pairs.append(pair_tests(systems).to_dict())
    return write_dashboard(views, pairs, out, title)
