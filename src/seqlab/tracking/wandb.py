"""W&B runs: online only when credentials exist, offline otherwise, never hanging, never leaking keys."""

from __future__ import annotations

import logging
import netrc
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from seqlab.config import check_choice
from seqlab.metrics import declarations as M
from seqlab.metrics import keys as K
from seqlab.tracking.results import segment_scores_of

log = logging.getLogger(__name__)
LoggerKind = Literal["wandb", "csv", "none"]
Mode = Literal["auto", "online", "offline"]
CSV_DIR = "csv"
RUN_ID_FILE = "wandb-run-id"


def summaries() -> tuple[tuple[str, str], ...]:
    """Summaries keep the best value, not the last: losses and perplexity are minimized, quality maximized
    (error scores, declared lower-is-better, minimized). (W&B's define_metric takes exact names or trailing
    globs only.)"""
    def best(m: str) -> str:
        return "min" if M.lower_is_better(m) else "max"

    return (*((name, "min") for name in ("train/loss", "val/loss", "val/nll", "val/ppl")),
            *((f"val/greedy_{m}", best(m)) for m in M.quality()),
            *((f"{split}/{m}", best(m)) for split in ("test", "validation") for m in M.quality()),
            *((f"{split}/{K.REF_PPL}", "min") for split in ("test", "validation")))
SECRET_KEY = re.compile(r"api_?key|secret|passw(or)?d|(^|_)token$|access_token|auth", re.IGNORECASE)


@dataclass(frozen=True)
class TrackingConfig:
    """Which logger, and for W&B: project, entity, group, tags, mode and init timeout (s)."""

    kind: LoggerKind = "wandb"
    project: str = "seqlab"
    entity: str | None = None
    group: str | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)
    mode: Mode = "auto"
    init_timeout: float = 30.0
    log_checkpoints: bool = False  # upload best/last as W&B model artifacts ("best", "latest") at the end

    def __post_init__(self) -> None:
        check_choice("logger", "kind", self.kind, LoggerKind)
        check_choice("logger", "mode", self.mode, Mode)


def has_credentials() -> bool:
    """An API key in the environment or a wandb entry in ~/.netrc."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def resolve_mode(cfg: TrackingConfig) -> str:
    """`auto`: WANDB_MODE if the user set it, else online with credentials, else offline."""
    if cfg.mode != "auto":
        return cfg.mode
    env = os.environ.get("WANDB_MODE")
    if env in ("online", "offline", "disabled"):
        return env
    return "online" if has_credentials() else "offline"


def scrub(config: Any) -> Any:
    """A copy of a nested config with every secret-looking value replaced."""
    if isinstance(config, dict):
        return {k: "***" if SECRET_KEY.search(str(k)) else scrub(v) for k, v in config.items()}
    if isinstance(config, list | tuple):
        return [scrub(v) for v in config]
    return config


def make_logger(cfg: TrackingConfig, save_dir: Path, name: str, group: str, config: dict[str, Any],
                job_type: str = "train", run_id: str | None = None, resumed_at: int | None = None) -> Any:
    """A Lightning logger for the run, with the resolved config attached; None for kind=none.

    `resumed_at`: the update a resumed training starts from (its CSV history keeps the rows before it).
    W&B: `job_type` is train / eval / sweep; `run_id` continues an earlier run (a resumed training);
    the summaries keep the best value of each metric (min loss, max BLEU/chrF/ROUGE), and the run's
    id is written to `<save_dir>/wandb-run-id` so that a resumed training can continue it.
    """
    save_dir.mkdir(parents=True, exist_ok=True)
    if cfg.kind == "none":
        return None
    if cfg.kind == "csv":
        logger = metric_history(save_dir, resumed_at)
        logger.log_hyperparams(scrub(config))
        return logger
    import wandb

    mode = resolve_mode(cfg)
    common = dict(project=cfg.project, entity=cfg.entity, name=name, group=cfg.group or group, tags=list(cfg.tags),
                  save_dir=str(save_dir), config=scrub(config), job_type=job_type,
                  log_model=cfg.log_checkpoints and job_type == "train",
                  **({"id": run_id, "resume": "allow"} if run_id else {}))
    logger = wandb_logger(mode=mode, settings=wandb.Settings(init_timeout=cfg.init_timeout, silent=True), **common)
    try:
        logger.experiment  # noqa: B018  (starts the run now, within init_timeout)
    except Exception as err:  # noqa: BLE001  network or service failure: fall back, never hang
        if mode == "offline":
            raise
        log.warning("W&B online start failed (%s); continuing offline", type(err).__name__)
        logger = wandb_logger(mode="offline", **common)
    run = logger.experiment
    for pattern, summary in summaries():
        run.define_metric(pattern, summary=summary)
    (save_dir / RUN_ID_FILE).write_text(run.id)
    if mode == "online" and getattr(run, "url", None):
        log.info("W&B run: %s", run.url)
    return logger


def wandb_logger(**kwargs: Any) -> Any:
    """Lightning's WandbLogger, less the `anonymous` key it always hands to `wandb.init`: W&B no longer has
    anonymous logging and warns on every run that is given the key, even as None."""
    from lightning.pytorch.loggers import WandbLogger

    logger = WandbLogger(**kwargs)
    logger._wandb_init.pop("anonymous", None)  # noqa: SLF001  (the arguments the run will be started with)
    return logger


def saved_run_id(run_dir: Path) -> str | None:
    """The W&B run id a training run folder recorded (to continue that run on resume)."""
    path = run_dir / RUN_ID_FILE
    return path.read_text().strip() if path.is_file() else None


def log_predictions(logger: Any, records: list[dict[str, Any]], key: str = "predictions", limit: int = 1000) -> None:
    """A W&B table of the first `limit` outputs: id, source, reference, hypothesis, its log-prob, the other
    n-best hypotheses or samples, and a column per neural metric scored (its segment scores: sortable)."""
    shown = records[:limit]
    neural = segment_scores_of(shown)  # metric -> the shown rows' scores
    columns = ["id", "source", "reference", "hypothesis", "logprob", "other_hypotheses", *neural]
    rows = [[r["id"], r["source"], r["reference"], r["hypothesis"],
             r["nbest"][0]["logprob"] if r.get("nbest") else None,
             "\n".join(n["text"] for n in r.get("nbest", [])[1:]),
             *(scores[i] for scores in neural.values())] for i, r in enumerate(shown)]
    logger.log_table(key=key, columns=columns, data=rows)


def scalar_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """What a dashboard can plot: numbers, and each interval as `<key>_low` / `<key>_high`."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, int | float):
            out[key] = value
        elif isinstance(value, list) and len(value) == 2 and key.endswith("_ci"):
            out[f"{key}_low"], out[f"{key}_high"] = value
    return out


def log_images(logger: Any, key: str, paths: list[Path], captions: list[str]) -> None:
    """Image files as one W&B image panel (none: nothing logged)."""
    if paths:
        logger.log_image(key=key, images=[str(p) for p in paths], caption=captions)


def metric_history(save_dir: Path, resumed_at: int | None = None) -> Any:
    """The run's metric history as `<save_dir>/csv/metrics.csv`, written next to W&B too, so that the
    local report can draw training curves with W&B offline or off (tracking.results.read_curves).

    A training resumed from a checkpoint at update `resumed_at` keeps the rows logged before it (Lightning's
    CSVLogger would delete the file) and drops later ones, which the resumed training logs again."""
    from lightning.pytorch.loggers import CSVLogger
    from lightning.pytorch.loggers.csv_logs import ExperimentWriter

    class ResumedWriter(ExperimentWriter):
        def __init__(self, log_dir: str) -> None:
            kept = earlier_rows(Path(log_dir) / self.NAME_METRICS_FILE, resumed_at)
            super().__init__(log_dir)  # deletes the file; its earlier rows are written again with the next save
            self.metrics = kept

    class ResumedCSVLogger(CSVLogger):
        @property
        def experiment(self) -> Any:
            if self._experiment is None:
                Path(self.root_dir).mkdir(parents=True, exist_ok=True)
                self._experiment = ResumedWriter(log_dir=self.log_dir)
            return self._experiment

    cls = CSVLogger if resumed_at is None else ResumedCSVLogger
    return cls(save_dir=str(save_dir), name=CSV_DIR, version="")


def earlier_rows(metrics_csv: Path, before_step: int | None) -> list[dict[str, Any]]:
    """The rows of a CSVLogger file logged before update `before_step` (Lightning logs update n as step
    n - 1), without empty cells; none for a fresh run."""
    import csv

    if before_step is None or not metrics_csv.is_file():
        return []
    with metrics_csv.open(newline="") as f:
        return [{k: v for k, v in row.items() if v != ""} for row in csv.DictReader(f)
                if int(row["step"]) < before_step]


def finish() -> None:
    """Close the current W&B run if any (safe to call always, e.g. in `finally`)."""
    import sys

    if "wandb" in sys.modules:
        import wandb

        if wandb.run is not None:
            wandb.finish()


def artifact_of(tracking: dict[str, Any], checkpoint: Path) -> str | None:
    """The W&B model artifact (name:alias) a training logged for this checkpoint file, if it logged any."""
    if not tracking.get("log_checkpoints") or not tracking.get("run_id"):
        return None
    return f"model-{tracking['run_id']}:{'best' if checkpoint.stem == 'best' else 'latest'}"


def use_artifact(logger: Any, artifact: str) -> None:
    """Record in an evaluation's W&B run that it used this checkpoint artifact (lineage); an offline run
    or a missing artifact keeps the name in the run's config only."""
    try:
        logger.use_artifact(artifact, artifact_type="model")
    except Exception as err:  # noqa: BLE001  offline, or the artifact is not on the server
        log.info("W&B artifact %s not linked (%s); its name is in the run config", artifact, type(err).__name__)
