"""Every experiment and decoding file composes and builds its typed configs (no data is read)."""

from __future__ import annotations

from dataclasses import fields

import pytest

from seqlab.app.configs import MODEL_FIELDS_FROM_ELSEWHERE, train_spec, typed
from seqlab.decoding import DecodingConfig
from seqlab.model import ModelConfig

from .conftest import CONF

EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
DECODINGS = sorted(p.stem for p in (CONF / "decoding").glob("*.yaml"))
SIZES = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_builds_its_typed_configs(make_cfg, tmp_path, experiment):
    cfg = make_cfg("train", [f"experiment={experiment}"])
    cfg.data.cache_dir = str(tmp_path / "untouched")
    spec = train_spec(cfg)
    assert spec.model.d_model > 0 and spec.loop.val_every_n_steps >= 1
    assert not (tmp_path / "untouched").exists()


@pytest.mark.parametrize("decoding", DECODINGS)
def test_every_decoding_file_builds_a_decoding_config(make_cfg, decoding):
    cfg = make_cfg("eval", ["ckpt=unused", f"decoding={decoding}"])
    built = typed(DecodingConfig, dict(cfg.decoding), "decoding")
    assert built.method in ("greedy", "beam", "sample")


@pytest.mark.parametrize("size", SIZES)
def test_model_sizes_take_every_variant_default_from_the_dataclass(make_cfg, size):
    cfg = make_cfg("train", [f"model={size}"])
    variant_fields = {f.name: f.default for f in fields(ModelConfig) if f.name not in MODEL_FIELDS_FROM_ELSEWHERE}
    assert set(cfg.model) == set(variant_fields)
    for name in ("norm_position", "positions", "tie_embeddings", "activation", "copy_attention"):
        assert cfg.model[name] == variant_fields[name]


def test_decoding_files_take_every_default_from_the_dataclass(make_cfg):
    cfg = make_cfg("eval", ["ckpt=unused", "decoding=greedy"])
    assert dict(cfg.decoding) == DecodingConfig().to_dict()
    assert len({tuple(sorted(make_cfg("eval", ["ckpt=unused", f"decoding={d}"]).decoding.items()))
                for d in DECODINGS}) == len(DECODINGS), "no two decoding files describe the same setting"
