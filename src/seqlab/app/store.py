"""Every config group's defaults, from its dataclass, registered with Hydra's ConfigStore on import.

The YAML files under conf/ extend these nodes (`defaults: [dataclass_defaults, _self_]`, or the node's name
in a primary config's defaults list) with only what differs, so each default is written once, in the
dataclass, and a YAML file reads as the delta it is. Every command module imports CONF_DIR from here,
so the nodes exist before Hydra composes anything.
"""

from __future__ import annotations

import os
from dataclasses import MISSING, asdict, fields
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from seqlab.app.infer import DistillSettings, InferenceSettings, TranslateSettings
from seqlab.bench.speed import BenchConfig
from seqlab.data import DataConfig
from seqlab.data.prompting import PromptSettings
from seqlab.decoding import DecodingConfig
from seqlab.model import ModelConfig
from seqlab.train.config import OptimConfig, TrainConfig

PROJECT_ROOT = Path(__file__).resolve().parents[3]
CONF_DIR = str(PROJECT_ROOT / "conf")  # every command's Hydra configs
DATACLASS_DEFAULTS = "dataclass_defaults"
# Fields no config file sets: vocabulary sizes come from the tokenizer, special ids are constants, the data
# seed is the run's `seed`, the corpus is each data file's own.
FROM_ELSEWHERE = {ModelConfig: ("src_vocab_size", "tgt_vocab_size", "pad_id", "bos_id", "eos_id", "extra_eos_ids"),
                  DataConfig: ("corpus", "seed")}

# `${project_root:}` in conf/paths: resolvable before Hydra's own config exists (sweep folders need it).
OmegaConf.register_new_resolver("project_root", lambda: str(PROJECT_ROOT), replace=True)
# `${working_dir:}`: where the command runs (Hydra keeps it: job.chdir is off), so that what a command writes
# for later runs (prepared data, tokenizers, engine choices) lands where the user works, never inside an
# installed package's checkout
OmegaConf.register_new_resolver("working_dir", lambda: os.getcwd(), replace=True)


def defaults(cls: type) -> dict[str, Any]:
    """A dataclass's defaults as a plain node; a field without one is Hydra's mandatory `???`."""
    node: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in FROM_ELSEWHERE.get(cls, ()):
            continue
        if f.default is not MISSING:
            value = f.default
        elif f.default_factory is not MISSING:
            value = f.default_factory()
        else:
            value = "???"
        node[f.name] = asdict(value) if hasattr(value, "__dataclass_fields__") else value
    return node


def register() -> None:
    store = ConfigStore.instance()
    for group, cls in (("model", ModelConfig), ("optim", OptimConfig), ("train", TrainConfig), ("data", DataConfig),
                       ("bench", BenchConfig)):
        store.store(group=group, name=DATACLASS_DEFAULTS, node=defaults(cls))
    store.store(group="decoding", name=DATACLASS_DEFAULTS, node=DecodingConfig().to_dict())
    store.store(group="prompt", name=DATACLASS_DEFAULTS, node=defaults(PromptSettings))  # train's prompt.*
    store.store(name="inference_defaults", node=defaults(InferenceSettings))  # eval's and translate's shared keys
    store.store(name="translate_defaults", node=defaults(TranslateSettings))
    store.store(name="distill_defaults", node=defaults(DistillSettings))


register()
