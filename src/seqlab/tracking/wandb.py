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

log = logging.getLogger(__name__)
LoggerKind = Literal["wandb", "csv", "none"]
Mode = Literal["auto", "online", "offline"]
CSV_DIR = "csv"
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


def make_logger(cfg: TrackingConfig, save_dir: Path, name: str, group: str, config: dict[str, Any]) -> Any:
    """A Lightning logger for the run, with the resolved config attached; None for kind=none."""
    save_dir.mkdir(parents=True, exist_ok=True)
    if cfg.kind == "none":
        return None
    if cfg.kind == "csv":
        logger = metric_history(save_dir)
        logger.log_hyperparams(scrub(config))
        return logger
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    mode = resolve_mode(cfg)
    logger = WandbLogger(
        project=cfg.project, entity=cfg.entity, name=name, group=cfg.group or group, tags=list(cfg.tags),
        save_dir=str(save_dir), mode=mode, config=scrub(config),
        settings=wandb.Settings(init_timeout=cfg.init_timeout, silent=True),
    )
    try:
        logger.experiment  # noqa: B018  (starts the run now, within init_timeout)
    except Exception as err:  # noqa: BLE001  network or service failure: fall back, never hang
        if mode == "offline":
            raise
        log.warning("W&B online start failed (%s); continuing offline", type(err).__name__)
        logger = WandbLogger(project=cfg.project, entity=cfg.entity, name=name, group=cfg.group or group,
                             tags=list(cfg.tags), save_dir=str(save_dir), mode="offline", config=scrub(config))
    return logger


def metric_history(save_dir: Path) -> Any:
    """The run's metric history as `<save_dir>/csv/metrics.csv`, written next to W&B too, so that the
    local report can draw training curves with W&B offline or off (tracking.results.read_curves)."""
    from lightning.pytorch.loggers import CSVLogger

    return CSVLogger(save_dir=str(save_dir), name=CSV_DIR, version="")


def finish() -> None:
    """Close the current W&B run if any (safe to call always, e.g. in `finally`)."""
    import sys

    if "wandb" in sys.modules:
        import wandb

        if wandb.run is not None:
            wandb.finish()
