"""`python -m pipelines.convert_study ARCHIVE ...`: an architecture-study archive in the records of the
one runner, without retraining (run once per archive; an archive already converted is left as it is).

The study's runner archived one record per (run, decoding), the training's curve, model and provenance
repeated in each: `<variant>-seed<N>.<label>.json` (and `.training.json` for a run judged on training
alone). The pipeline runner archives one record per stage: `<variant>-seed<N>.json` for the training and
`<variant>-seed<N>.<label>.json` for each decoding, each with the digest of its stage as the study's pipeline
declares it (pipelines/arch_study.py, pipelines/arch_study_trained.py), so that the runner finds them
archived. The hypotheses, references and source lengths keep their files. An archive whose records carry no
provenance of their own takes its `MANIFEST.json`'s (which it then no longer needs).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipelines import PIPELINES
from seqlab.analysis.study import REFERENCES, SOURCE_TOKENS, TRAINING
from seqlab.app.runner import plan
from seqlab.io import atomic_write_text
from seqlab.pipeline.core import Pipeline

LEGACY_MANIFEST = "MANIFEST.json"


def legacy_records(archive: Path) -> list[Path]:
    """The study runner's records: each names its variant and seed inside."""
    return [p for p in sorted(archive.glob("*-seed*.json")) if "variant" in json.loads(p.read_text())]


def convert(archive: Path, pipeline: Pipeline) -> list[Path]:
    """Rewrite `archive`'s study records as `pipeline`'s stage records; returns the files written."""
    old = legacy_records(archive)
    if not old:
        return []
    digests = {p.stage.name: p.digest for p in plan(pipeline)}
    shared = archive / LEGACY_MANIFEST
    fallback = json.loads(shared.read_text()) if shared.is_file() else None
    trainings: dict[str, dict[str, Any]] = {}
    written: list[Path] = []
    for path in old:
        e = json.loads(path.read_text())
        run = f"{e['variant']}-seed{e['seed']}"
        manifest = e.get("training") or fallback
        if manifest is None:
            raise ValueError(f"{path}: no training provenance and no {shared}")
        trainings.setdefault(run, {"stage": run, "status": e.get("status", "ok"), "digest": digests.get(run),
                                   "result": {"val_curve": e["val_curve"], "steps": e["steps"],
                                              "model": e.get("model", {}), "params": e["params"]},
                                   "manifest": manifest})
        if e["label"] == TRAINING:
            path.unlink()
            continue
        stage = f"{run}.{e['label']}"
        outputs: dict[str, Any] = {"hypotheses": path.with_suffix(".hyps.txt.gz").name, "references": [REFERENCES]}
        if (archive / SOURCE_TOKENS).is_file():
            outputs["source_tokens"] = SOURCE_TOKENS
        record = {"stage": stage, "status": "ok", "digest": digests.get(stage),
                  "result": {"metrics": e["metrics"], "label": e["label"], "decoding": None, "outputs": outputs},
                  "manifest": e.get("evaluation") or fallback}
        written.append(atomic_write_text(path, json.dumps(record, indent=1) + "\n"))
    for run, record in trainings.items():
        written.append(atomic_write_text(archive / f"{run}.json", json.dumps(record, indent=1) + "\n"))
    if fallback is not None:
        shared.unlink()
    return written


def main(argv: list[str]) -> int:
    for name in argv:
        archive = Path(name)
        if archive.name not in PIPELINES:
            print(f"{archive}: not named as a pipeline's archive ({', '.join(PIPELINES)})", file=sys.stderr)
            return 2
        pipeline = replace(PIPELINES[archive.name], folder=archive)
        print(f"{archive}: {len(convert(archive, pipeline))} records written", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
