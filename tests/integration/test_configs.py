"""Every experiment and decoding file composes and builds its typed configs (no data is read)."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest
from omegaconf import OmegaConf

from seqlab.app.configs import plain, train_spec, typed
from seqlab.app.infer import InferenceSettings, TranslateSettings
from seqlab.app.store import defaults
from seqlab.bench.speed import BenchConfig
from seqlab.data import DataConfig
from seqlab.decoding import DecodingConfig
from seqlab.model import ModelConfig
from seqlab.train.config import OptimConfig, TrainConfig

from .conftest import CONF

EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
DECODINGS = sorted(p.stem for p in (CONF / "decoding").glob("*.yaml"))
SIZES = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_builds_its_typed_configs(make_cfg, tmp_path, experiment):
    cfg = make_cfg("train", [f"experiment={experiment}"])
    cfg.data.cache_dir = str(tmp_path / "untouched")
    spec = train_spec(cfg)
    assert spec.model.d_model > 0 and spec.train.val_every_n_steps >= 1
    assert not (tmp_path / "untouched").exists()


@pytest.mark.parametrize("decoding", DECODINGS)
def test_every_decoding_file_builds_a_decoding_config(make_cfg, decoding):
    """Each preset composes into a valid DecodingConfig that keeps what the file sets."""
    import yaml

    cfg = make_cfg("eval", ["ckpt=unused", f"decoding={decoding}"])
    built = typed(DecodingConfig, dict(cfg.decoding), "decoding")
    own = {k: v for k, v in (yaml.safe_load((CONF / "decoding" / f"{decoding}.yaml").read_text()) or {}).items()
           if k != "defaults" and not isinstance(v, dict)}
    assert {k: getattr(built, k) for k in own} == own


@pytest.mark.parametrize("size", SIZES)
def test_model_sizes_take_every_variant_default_from_the_dataclass(make_cfg, size):
    cfg = make_cfg("train", [f"model={size}"])
    variant_fields = defaults(ModelConfig)
    assert set(cfg.model) == set(variant_fields)
    for name in ("norm_position", "positions", "tie_embeddings", "activation", "copy_attention"):
        assert cfg.model[name] == variant_fields[name]


def test_decoding_files_take_every_default_from_the_dataclass_and_differ_in_setting_and_label(make_cfg):
    """Each preset composed once: greedy is the dataclass's defaults, no two files describe the same setting, and
    no two share a label (result folders are named by label: they would overwrite each other's results)."""
    presets = {d: dict(make_cfg("eval", ["ckpt=unused", f"decoding={d}"]).decoding) for d in DECODINGS}
    assert presets["greedy"] == DecodingConfig().to_dict()
    assert len({tuple(sorted(v.items())) for v in presets.values()}) == len(DECODINGS), "two files, one setting"
    labels = {d: typed(DecodingConfig, values, "decoding").label for d, values in presets.items()}
    assert len(set(labels.values())) == len(labels), labels


def test_optim_and_loop_defaults_are_the_dataclasses(make_cfg):
    cfg = make_cfg("train", ["experiment=mt_bible_small"])
    spec = train_spec(cfg)  # the experiment's deltas on the dataclass defaults, and nothing else
    assert spec.optim == replace(OptimConfig(), lr=1e-3, warmup_steps=500)
    assert spec.train == replace(TrainConfig(), val_every_n_steps=300)
    assert set(cfg.optim) == {f.name for f in fields(OptimConfig)}
    assert set(cfg.train) == {f.name for f in fields(TrainConfig)}


def test_inference_keys_and_the_bench_come_from_their_dataclasses(make_cfg):
    for name, cls in (("eval", InferenceSettings), ("translate", TranslateSettings)):
        cfg = make_cfg(name, ["ckpt=x", "engine=auto"])  # make_cfg pins engine=seqlab unless an engine is given
        assert {f.name: plain(cfg[f.name]) for f in fields(cls)} == {**defaults(cls), "ckpt": "x"}
    assert typed(BenchConfig, plain(make_cfg("bench", []).bench), "bench") == BenchConfig()


@pytest.mark.parametrize("path", sorted((CONF / "data").glob("*.yaml")), ids=lambda p: p.stem)
def test_data_files_hold_only_what_differs_from_the_dataclass(path):
    own = OmegaConf.to_container(OmegaConf.load(path))
    base = defaults(DataConfig)
    same = [k for k, v in own.items() if k in base and k != "tokenizer" and v == base[k]]
    same += [f"tokenizer.{k}" for k, v in (own.get("tokenizer") or {}).items() if v == base["tokenizer"][k]]
    assert same == []
    assert set(own) - {"defaults", "corpus"} <= set(base)


def test_a_command_run_elsewhere_keeps_its_cache_where_it_runs(tmp_path, monkeypatch):
    """Prepared data and tokenizers go under the folder the command runs in, never into the installed checkout."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    monkeypatch.chdir(tmp_path)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=["experiment=smoke"])
    GlobalHydra.instance().clear()
    assert cfg.paths.cache_dir == str(tmp_path / "cache") == cfg.data.cache_dir
    assert cfg.paths.root_dir == str(CONF.parent)  # the configs and data still come from the package
