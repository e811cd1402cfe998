"""Multi-process training through the `seqlab train` command: Lightning starts each further rank by running the
command line again, which must reach the command (not the `seqlab` dispatcher) and must not lock the first rank's
run folder. trainer=ddp on two CPU processes trains and leaves one checkpoint every command reads; trainer=fsdp
(Lightning's FSDPStrategy, GPUs only) is refused on a CPU by name, and on a GPU one FSDP rank trains the weights
a plain single-GPU run does."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from seqlab.checkpoint import load_for_inference
from seqlab.config import ConfigError
from seqlab.train.config import TrainConfig
from seqlab.train.fsdp import check_fsdp

COMMON = ["experiment=smoke", "logger=none", "trainer.max_steps=3", "trainer.precision=32", "train.quick_eval_size=0",
          "train.val_every_n_steps=100", "model.dropout=0.0"]


def train_with(overrides: list[str], out, tmp_path) -> dict[str, torch.Tensor]:
    """`seqlab train` in a process of its own; the weights of its last checkpoint, read as any command reads it."""
    cache = tmp_path / "cache"
    done = subprocess.run(
        [sys.executable, "-m", "seqlab.app.main", "train", *COMMON, *overrides, f"paths.output_dir={out}",
         f"paths.log_dir={tmp_path / 'logs'}", f"paths.cache_dir={cache}", f"data.cache_dir={cache}"],
        cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    model, _, info = load_for_inference(out / "checkpoints" / "last.ckpt")
    assert info.step == 3
    return model.state_dict()


@pytest.mark.slow
def test_the_seqlab_command_runs_ddp_on_two_cpu_processes(tmp_path):
    one = train_with(["trainer=cpu"], tmp_path / "one", tmp_path)
    two = train_with(["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"], tmp_path / "ddp", tmp_path)
    assert one.keys() == two.keys()
    assert max((one[k] - two[k]).abs().max().item() for k in one) > 1e-6  # two ranks saw other batches


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="Lightning's FSDPStrategy runs on CUDA GPUs only")
def test_one_fsdp_rank_trains_the_weights_of_a_plain_gpu_run(tmp_path):
    plain = train_with(["trainer=gpu", "trainer.devices=1"], tmp_path / "plain", tmp_path)
    sharded = train_with(["trainer=fsdp", "trainer.accelerator=gpu", "trainer.devices=1"], tmp_path / "fsdp", tmp_path)
    assert plain.keys() == sharded.keys()
    assert max((plain[k] - sharded[k]).abs().max().item() for k in plain) <= 1e-5


def test_what_fsdp_does_not_cover_is_refused_by_name():
    ready = TrainConfig(quick_eval_size=0)
    with pytest.raises(ConfigError, match="trainer.accelerator=cpu: Lightning's FSDPStrategy runs on CUDA GPUs only"):
        check_fsdp(ready, "cpu", True)
    with pytest.raises(ConfigError, match="torch sees none here"):
        check_fsdp(ready, "auto", False)
    with pytest.raises(ConfigError, match="train.quick_eval_size=200"):
        check_fsdp(TrainConfig(), "gpu", True)
    with pytest.raises(ConfigError, match="trainer=fsdp with train.lora.r"):
        check_fsdp(TrainConfig(quick_eval_size=0, lora={"r": 4}), "gpu", True)
    check_fsdp(ready, "gpu", True)
