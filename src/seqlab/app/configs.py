"""The Hydra edge: a composed DictConfig -> typed seqlab configs, validated before any data is read; and
what a command needs to know about the Hydra job it runs in (multirun, sweep group, job name)."""

from __future__ import annotations

import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from seqlab.config import ConfigError, typed
from seqlab.data import DataConfig
from seqlab.data.prompting import PromptSettings
from seqlab.decoding import DecodingConfig
from seqlab.model import ModelConfig
from seqlab.tracking.wandb import TrackingConfig
from seqlab.train.config import OptimConfig, TrainConfig
from seqlab.train.levers import check_bf16_weights
from seqlab.train.optim import check_fused_clipping

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainSpec:
    model: ModelConfig  # vocabulary sizes are placeholders until the tokenizer exists
    data: DataConfig
    optim: OptimConfig
    train: TrainConfig
    tracking: TrackingConfig
    prompt: PromptSettings = PromptSettings()  # how an imported causal LM is asked its corpus (fine-tuning)


def plain(cfg: DictConfig | Any) -> Any:
    """A resolved plain-Python copy of a config node, without Hydra's own `hydra` section."""
    if not isinstance(cfg, DictConfig | ListConfig):
        return cfg
    if isinstance(cfg, ListConfig):
        return OmegaConf.to_container(cfg, resolve=True)
    return {k: plain(cfg[k]) for k in cfg if k != "hydra"}


def data_config(cfg: DictConfig) -> DataConfig:
    return DataConfig.from_dict({**plain(cfg.data), "seed": cfg.seed})


def train_spec(cfg: DictConfig) -> TrainSpec:
    """Every typed config of a training run; raises ConfigError naming the key on a bad value."""
    data = data_config(cfg)
    vocab = data.tokenizer.vocab_size
    model_values = {"src_vocab_size": vocab, "tgt_vocab_size": None if data.tokenizer.joint else vocab,
                    **plain(cfg.model)}
    model = ModelConfig.from_dict(model_values)
    optim_values = plain(cfg.optim)
    optim_values["betas"] = tuple(optim_values["betas"])  # YAML has lists; the config is frozen, hashable
    optim = typed(OptimConfig, optim_values, "optim")
    train = typed(TrainConfig, plain(cfg.train), "train")
    check_trainer(cfg)
    check_fused_clipping(optim.fused, optim.clip_norm, cfg.trainer.get("precision"))
    check_bf16_weights(train.bf16_weights, str(cfg.trainer.get("precision")))  # auto: checked once resolved
    prompt = PromptSettings.of(plain(cfg.get("prompt")) or {}, "prompt")
    return TrainSpec(model, data, optim, train, tracking_config(cfg), prompt)


def check_trainer(cfg: DictConfig) -> None:
    """The Trainer values Lightning would only reject after the data is prepared."""
    for key in ("max_steps", "log_every_n_steps", "devices", "num_nodes", "accumulate_grad_batches"):
        value = cfg.trainer.get(key)
        if value is None or (isinstance(value, str) and key == "devices"):
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"trainer.{key}={value!r} must be an integer")
        if key == "max_steps" and value != -1 and value < 1:
            raise ConfigError(f"trainer.max_steps={value} must be positive, or -1 for no step limit")
        if key != "max_steps" and value < 1:
            raise ConfigError(f"trainer.{key}={value} must be at least 1")


def tracking_values(cfg: DictConfig) -> dict[str, Any]:
    """The `logger` group's values, typed by TrackingConfig (tags as a tuple)."""
    values = plain(cfg.logger)
    values["tags"] = tuple(values.get("tags") or ())
    return values


def tracking_config(cfg: DictConfig) -> TrackingConfig:
    """The `logger` group as a TrackingConfig."""
    return typed(TrackingConfig, tracking_values(cfg), "logger")


def is_multirun() -> bool:
    """Whether this job is one of a Hydra multirun (False outside Hydra)."""
    from hydra.core.hydra_config import HydraConfig

    try:
        mode = HydraConfig.get().mode
    except ValueError:
        return False
    return mode is not None and mode.name == "MULTIRUN"


def sweep_group(cfg: DictConfig) -> str:
    """W&B group: the user's, else the sweep folder in a multirun, else the run name."""
    from hydra.core.hydra_config import HydraConfig

    if cfg.logger.get("group"):
        return str(cfg.logger.group)
    if is_multirun():
        return f"{cfg.run_name}-{os.path.basename(HydraConfig.get().sweep.dir)}"
    return str(cfg.run_name)


def job_name(cfg: DictConfig) -> str:
    """A readable run name: the run name plus this job's command-line overrides."""
    from hydra.core.hydra_config import HydraConfig

    try:
        overrides = [o for o in HydraConfig.get().overrides.task if not o.startswith(("hydra.", "paths."))]
    except ValueError:
        overrides = []
    return str(cfg.run_name) + ("/" + ",".join(overrides) if overrides else "")


def checkpoint_decoding(info: Any, overrides: dict[str, Any] | None = None) -> DecodingConfig:
    """The decoding defaults a checkpoint carries (an imported model's generation config), with the command
    line's `decoding.*` values on top of them (`decoding_overrides`)."""
    if not info.decoding:
        raise ConfigError(f"{info.path} carries no decoding defaults; drop decoding_from_checkpoint=true")
    return typed(DecodingConfig, {**dict(info.decoding), **dict(overrides or {})}, f"{info.path}: decoding")


def decoding_overrides(cfg: DictConfig) -> dict[str, Any]:
    """The decoding.* values the command line set (Hydra's task overrides), by field: what a decoding from the
    checkpoint's own defaults changes (`decoding=PRESET` itself is a preset, not a change to them)."""
    from hydra.core.hydra_config import HydraConfig

    try:
        task = list(cfg.hydra.overrides.task) if "hydra" in cfg else list(HydraConfig.get().overrides.task)
    except ValueError:
        return {}
    keys = [o.split("=", 1)[0].lstrip("+~") for o in task]
    fields = [k.split(".", 1)[1] for k in keys if k.startswith("decoding.")]
    return {f: plain(cfg.decoding[f]) for f in dict.fromkeys(fields) if f in cfg.decoding}


@dataclass
class JobLog:
    """A multirun's outcome in this process: what finished, what failed, and the exit status it means."""

    what: str  # "training", "evaluation"
    finished: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)  # the signals ("SIGTERM") that stopped a job before its end

    def summary(self) -> int:
        """Print the failures (and the counts, for a sweep); 1 if anything failed, else 128 + the signal's
        number if a signal stopped a job before its end (not finished, so not a success), else 0."""
        if self.failed or len(self.finished) > 1:
            print(f"{self.what}: {len(self.finished)} finished, {len(self.failed)} failed", file=sys.stderr)
            for failure in self.failed:
                print(f"  failed: {failure}", file=sys.stderr)
        if self.failed:
            return 1
        return 128 + signal.Signals[self.stopped[0]].value if self.stopped else 0
