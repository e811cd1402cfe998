"""trainer=fsdp: two CPU processes (gloo), each layer a sharded unit, train as DDP does (the same data split by
rank, the gradients averaged): the weights after a few steps equal DDP's within rounding, and the checkpoint is
one whole file every command reads."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from seqlab.checkpoint import load_for_inference
from seqlab.config import ConfigError
from seqlab.train.config import TrainConfig
from seqlab.train.fsdp import check_fsdp


def train_with(strategy: str, tmp_path, cache) -> dict[str, torch.Tensor]:
    out = tmp_path / strategy
    done = subprocess.run(
        [sys.executable, "-m", "seqlab.app.main", "train", "experiment=smoke", "logger=none", f"trainer={strategy}",
         "trainer.accelerator=cpu", "trainer.devices=2", "trainer.max_steps=3", "trainer.precision=32",
         "train.quick_eval_size=0", "train.val_every_n_steps=100", "model.dropout=0.0",
         f"paths.output_dir={out}", f"paths.log_dir={tmp_path / 'logs'}", f"paths.cache_dir={cache}",
         f"data.cache_dir={cache}"],
        cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    model, _, info = load_for_inference(out / "checkpoints" / "last.ckpt")  # one file, read as any checkpoint
    assert info.step == 3
    return model.state_dict()


@pytest.mark.slow
def test_fsdp_on_two_cpu_processes_trains_the_weights_ddp_does(tmp_path):
    cache = tmp_path / "cache"
    ddp, fsdp = train_with("ddp", tmp_path, cache), train_with("fsdp", tmp_path, cache)
    assert ddp.keys() == fsdp.keys()
    assert max((ddp[k] - fsdp[k]).abs().max().item() for k in ddp) <= 1e-5


def test_what_fsdp_does_not_cover_is_refused_by_name():
    with pytest.raises(ConfigError, match="train.quick_eval_size=200"):
        check_fsdp(TrainConfig())
    with pytest.raises(ConfigError, match="trainer=fsdp with train.lora.r"):
        check_fsdp(TrainConfig(quick_eval_size=0, lora={"r": 4}))
    check_fsdp(TrainConfig(quick_eval_size=0))
