"""Compose Hydra configs the way the commands do, with every path inside a temporary folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

import seqlab.app.store  # noqa: F401  (registers the dataclass defaults the YAML files extend)

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    """One tokenizer/data cache for the whole session: the smoke tokenizer is trained once."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def make_cfg(tmp_path, shared_cache):
    """make_cfg(config_name, overrides) -> a composed DictConfig writing only under tmp_path."""

    def make(name: str = "train", overrides: list[str] | None = None, out: Path | None = None) -> DictConfig:
        GlobalHydra.instance().clear()
        out = out or tmp_path / "run"
        overrides = list(overrides or [])
        if name in ("eval", "translate") and not any(o.startswith("engine=") for o in overrides):
            overrides.append("engine=seqlab")  # engine=auto's choice depends on this machine's speed
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose(config_name=name, overrides=overrides, return_hydra_config=True)
        with open_dict(cfg):
            cfg.paths.root_dir = str(ROOT)
            cfg.paths.data_dir = str(ROOT / "data")
            cfg.paths.log_dir = str(tmp_path / "outputs")
            cfg.paths.output_dir = str(out)
            cfg.paths.cache_dir = str(shared_cache)
            if "data" in cfg:
                cfg.data.cache_dir = str(shared_cache)
            if "results_dir" in cfg:
                cfg.results_dir = str(tmp_path / "outputs" / "eval_results")
        HydraConfig.instance().set_config(cfg)
        return cfg

    yield make
    GlobalHydra.instance().clear()


def smoke_training(out: Path, cache: Path, overrides: list[str]) -> Path:
    """last.ckpt of a smoke training (experiment=smoke, no logger, no quick decode) with `overrides`, its
    outputs under `out` and its data in `cache`."""
    from seqlab.app.train import train

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=["experiment=smoke", "logger=none", "train.quick_eval_size=0",
                                                      *overrides], return_hydra_config=True)
    with open_dict(cfg):
        cfg.paths.log_dir = str(out / "outputs")
        cfg.paths.output_dir = str(out / "run")
        cfg.data.cache_dir = str(cache)
    HydraConfig.instance().set_config(cfg)
    result = train(cfg)
    GlobalHydra.instance().clear()
    return Path(result["last"])


@pytest.fixture(scope="session")
def smoke_checkpoint(tmp_path_factory, shared_cache) -> Path:
    """last.ckpt of a 2-step smoke training, shared by the session's tests (read it, never write it)."""
    return smoke_training(tmp_path_factory.mktemp("smoke_ckpt"), shared_cache, ["trainer.max_steps=2"])
