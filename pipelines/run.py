"""Running a pipeline: each stage's resolved config and digest, skipping what the archive holds, archiving
each result with its manifest the moment it lands. A failed stage is never marked done."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.core import OUTPUTS, Pipeline, Stage
from seqlab.io import atomic_write_text
from seqlab.provenance import capture

CONFIG_NAMES = {"train": "train", "evaluate": "eval", "bench": "bench"}  # the Hydra config each command composes
DROPPED = ("paths", "root_dir", "data_dir", "cache_dir", "log_dir", "output_dir", "hydra", "results_dir", "logger",
           "out", "ckpt")  # where things go, not what they compute
Runner = Callable[..., bool]  # seqlab(*args) -> whether it succeeded


class PipelineError(ValueError):
    """A stage that cannot give one result on any machine; the message names the stage and the key."""


@dataclass
class Planned:
    stage: Stage
    digest: str | None  # None: the stage skips what it holds itself (seqlab study)
    archived: bool
    config: dict[str, Any] | None = None  # the resolved config the digest covers


def resolved_config(stage: Stage) -> dict[str, Any]:
    """The config seqlab composes for the stage, resolved, as plain data."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from seqlab.app.store import CONF_DIR

    GlobalHydra.instance().clear()
    overrides = [o for o in stage.overrides if not o.startswith("hydra.")]
    if stage.command == "evaluate":
        overrides.append("ckpt=upstream")
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name=CONFIG_NAMES[stage.command], overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    plain = {k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
             for k in cfg if k not in DROPPED}
    GlobalHydra.instance().clear()
    return plain


def check_fixed(stage: Stage, config: dict[str, Any]) -> None:
    """A training stops at a fixed number of updates with a pinned precision; a decoding pins its engine."""
    if stage.command == "train":
        trainer = config.get("trainer", {})
        if trainer.get("max_time") is not None or not (trainer.get("max_steps") or 0) > 0:
            raise PipelineError(f"stage {stage.name}: training must stop at trainer.max_steps (now "
                                f"{trainer.get('max_steps')}) with trainer.max_time=null (now "
                                f"{trainer.get('max_time')}), so that one digest means one result on any CPU")
        if trainer.get("precision") == "auto":
            raise PipelineError(f"stage {stage.name}: trainer.precision=auto is chosen by a probe at start-up; "
                                "pin it (bf16-mixed or 32)")
    if stage.command == "evaluate":
        for key in ("precision", "engine"):
            if config.get(key) in (None, "auto"):
                raise PipelineError(f"stage {stage.name}: {key}={config.get(key)} is chosen at run time; pin it")


def digest(stage: Stage, config: dict[str, Any], upstream: str | None) -> str:
    payload = {"command": stage.command, "config": config, "upstream": upstream}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def record_path(pipeline: Pipeline, stage: Stage) -> Path:
    return pipeline.archive / f"{stage.name}.json"


def archived_digest(pipeline: Pipeline, stage: Stage) -> str | None:
    path = record_path(pipeline, stage)
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    return record.get("digest") if record.get("status") == "ok" else None


def plan(pipeline: Pipeline) -> list[Planned]:
    """Every stage with its digest and whether the archive holds its result."""
    digests: dict[str, str | None] = {}
    out = []
    for stage in pipeline.stages:
        if stage.command == "study":
            out.append(Planned(stage, None, False))
            continue
        config = resolved_config(stage)
        check_fixed(stage, config)
        d = digest(stage, config, digests.get(stage.after) if stage.after else None)
        digests[stage.name] = d
        out.append(Planned(stage, d, archived_digest(pipeline, stage) == d, config))
    return out


def seqlab(*args: str) -> bool:
    return subprocess.run([sys.executable, "-m", "seqlab", *args]).returncode == 0


def run_dir(pipeline: Pipeline, stage: Stage) -> Path:
    return OUTPUTS / pipeline.name / stage.name


def command_line(pipeline: Pipeline, stage: Stage) -> list[str]:
    """The seqlab command that runs the stage, its outputs under outputs/pipelines/<pipeline>/<stage>."""
    where = run_dir(pipeline, stage)
    if stage.command == "train":
        return ["train", *stage.overrides, f"hydra.run.dir={where}"]
    if stage.command == "evaluate":
        assert stage.after is not None
        return ["evaluate", f"ckpt={run_dir(pipeline, pipeline.stage(stage.after))}", *stage.overrides,
                f"results_dir={where}"]
    if stage.command == "bench":
        return ["bench", *stage.overrides, f"out={where / 'bench.json'}"]
    return [stage.command, *stage.overrides]


def execute(pipeline: Pipeline, runner: Runner = seqlab, dry_run: bool = False) -> list[str]:
    """Run the stages the archive lacks (and the trainings whose checkpoints they need); returns what failed."""
    planned = plan(pipeline)
    needed = {p.stage.name for p in planned if not p.archived}
    for p in planned:  # an evaluation to run needs its training's checkpoint on this machine
        if p.stage.name in needed and p.stage.after and not (run_dir(pipeline, pipeline.stage(p.stage.after))
                                                              / "checkpoints").is_dir():
            needed.add(p.stage.after)
    failed: list[str] = []
    for p in planned:
        line = "seqlab " + " ".join(command_line(pipeline, p.stage))
        if p.stage.name not in needed:
            print(f"== {p.stage.name}: archived ({p.digest})", file=sys.stderr)
            continue
        if p.stage.after in failed:
            failed.append(p.stage.name)
            print(f"== {p.stage.name}: not run, {p.stage.after} failed", file=sys.stderr)
            continue
        print(f"== {p.stage.name}: {'would run' if dry_run else 'running'}: {line}", file=sys.stderr)
        if dry_run:
            continue
        start = time.perf_counter()
        if not runner(*command_line(pipeline, p.stage)):
            failed.append(p.stage.name)
            continue
        if p.digest is not None:
            archive_stage(pipeline, p, line, time.perf_counter() - start)
    return failed


def archive_stage(pipeline: Pipeline, planned: Planned, line: str, wall_s: float) -> Path:
    """The stage's record: its digest, its result (metrics, or a training's curve and steps) and manifest."""
    from seqlab.tracking.results import METRICS_FILE, read_val_curve

    stage, where = planned.stage, run_dir(pipeline, planned.stage)
    result: dict[str, Any] = {}
    precision, engine, updates = "", None, None
    if stage.command == "train":
        result["val_curve"] = read_val_curve(where / "csv" / "metrics.csv")
        updates = result["val_curve"][-1][0] if result["val_curve"] else None
        precision = str(planned.config["trainer"]["precision"])
    elif stage.command == "evaluate":
        payload = json.loads(next(where.glob(f"**/{METRICS_FILE}")).read_text())
        result = {"metrics": payload["metrics"], "label": payload.get("label"), "decoding": payload.get("decoding")}
        precision, engine = str(payload["settings"]["precision"]), str(payload.get("engine"))
        updates = payload.get("checkpoint", {}).get("step")
    elif stage.command == "bench":
        result = json.loads((where / "bench.json").read_text())
    manifest = capture(line, precision, engine, wall_s, updates).to_dict()
    record = {"stage": stage.name, "status": "ok", "digest": planned.digest, "result": result, "manifest": manifest}
    return atomic_write_text(record_path(pipeline, stage), json.dumps(record, indent=1, default=str) + "\n")
