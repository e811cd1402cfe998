"""Interruption, NaN losses, corrupt checkpoints, secrets, determinism and odd inputs."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from seqlab.app.train import train
from seqlab.checkpoint import CheckpointError, load_for_inference, read_checkpoint
from seqlab.data import Example
from seqlab.decoding import DecodingConfig
from seqlab.inference.evaluation import EvalSettings, evaluate
from seqlab.train.module import NonFiniteLossError

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ["experiment=smoke", "logger=none", "train.quick_eval_size=0"]


def weights(path) -> dict[str, torch.Tensor]:
    return read_checkpoint(path)["state_dict"]


@pytest.mark.slow  # the resume test trains twice from one seed and compares the weights
def test_same_seed_same_results(make_cfg, tmp_path):
    a = train(make_cfg("train", [*SMOKE, "model.dropout=0.1"], out=tmp_path / "a"))
    b = train(make_cfg("train", [*SMOKE, "model.dropout=0.1"], out=tmp_path / "b"))
    assert a["metrics"]["val/loss"] == b["metrics"]["val/loss"]
    wa, wb = weights(a["last"]), weights(b["last"])
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_nan_loss_stops_naming_step_and_checkpoint(make_cfg, tmp_path, monkeypatch):
    import seqlab.train.levers as module  # where the training step takes its loss

    real, calls = module.label_smoothed_nll, {"n": 0}

    def poisoned(*args, **kwargs):
        calls["n"] += 1
        loss, nll, n = real(*args, **kwargs)
        return (loss * float("nan"), nll, n) if calls["n"] == 5 else (loss, nll, n)

    monkeypatch.setattr(module, "label_smoothed_nll", poisoned)
    cfg = make_cfg("train", [*SMOKE, "train.checkpoint_every_n_steps=2", "train.val_every_n_steps=100"])
    with pytest.raises(NonFiniteLossError) as err:
        train(cfg)
    assert "non-finite loss at step" in str(err.value) and "last.ckpt" in str(err.value)
    state = weights(tmp_path / "run" / "checkpoints" / "last.ckpt")
    assert all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point())


def test_nan_loss_skip_policy_counts_batches(make_cfg, monkeypatch):
    import seqlab.train.levers as module  # where the training step takes its loss

    real, calls = module.label_smoothed_nll, {"n": 0}

    def poisoned(*args, **kwargs):
        calls["n"] += 1
        loss, nll, n = real(*args, **kwargs)
        return (loss * float("inf"), nll, n) if calls["n"] in (2, 3) else (loss, nll, n)

    monkeypatch.setattr(module, "label_smoothed_nll", poisoned)
    result = train(make_cfg("train", [*SMOKE, "train.nan_policy=skip", "train.val_every_n_steps=100"]))
    assert result["metrics"]["train/skipped_batches"] == 2.0
    state = weights(result["last"])
    assert all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point())


def test_corrupt_truncated_and_foreign_checkpoints(make_cfg, tmp_path):
    result = train(make_cfg("train", SMOKE))
    good = Path(result["last"]).read_bytes()
    (tmp_path / "cut.ckpt").write_bytes(good[: len(good) // 2])
    (tmp_path / "noise.ckpt").write_bytes(os.urandom(4096))
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (tmp_path / "evil.ckpt").write_bytes(pickle.dumps({"seqlab": Evil(), "state_dict": {}}))
    torch.save({"state_dict": {}}, tmp_path / "foreign.ckpt")
    for name, message in (("cut", "truncated"), ("noise", "cannot be read"), ("evil", "cannot be read"),
                          ("foreign", "not a seqlab checkpoint"), ("missing", "not found")):
        with pytest.raises(CheckpointError) as err:
            load_for_inference(tmp_path / f"{name}.ckpt")
        assert message in str(err.value) and f"{name}.ckpt" in str(err.value)
    assert not marker.exists(), "loading must never run code from the file"


@pytest.mark.slow
def test_wandb_key_never_written_and_offline_fallback(tmp_path, shared_cache):
    key = "0123456789abcdef0123456789abcdef01234567"
    env = {**os.environ, "WANDB_API_KEY": key, "WANDB_SILENT": "true"}
    env.pop("WANDB_MODE", None)
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "seqlab", "train", "experiment=smoke", "logger=wandb", "logger.init_timeout=20",
         "trainer.max_steps=2", "train.quick_eval_size=0", f"hydra.run.dir={tmp_path / 'run'}",
         f"paths.log_dir={tmp_path}", f"paths.cache_dir={shared_cache}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert time.monotonic() - start < 240
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*")), "fell back to a local offline run"
    assert key not in proc.stdout + proc.stderr
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), f"API key written to {path}"


def start_training(tmp_path: Path, cache: Path, run_dir: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "seqlab", "train", *SMOKE, "trainer.max_steps=400", "train.checkpoint_every_n_steps=5",
         "train.val_every_n_steps=1000", "trainer.log_every_n_steps=1", f"hydra.run.dir={run_dir}",
         f"paths.log_dir={tmp_path / 'outputs'}", f"paths.cache_dir={cache}"],
        cwd=ROOT, env={**os.environ, "WANDB_MODE": "offline"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        assert time.monotonic() < deadline, "training did not reach its first checkpoint"
        time.sleep(0.2)


# a first SIGINT takes SIGTERM's path
@pytest.mark.parametrize("sig", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)])
def test_signal_writes_last_checkpoint_and_stops(tmp_path, shared_cache, sig):
    proc = start_training(tmp_path, shared_cache, tmp_path / "run")
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    wait_for(last, proc)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, out[-3000:]  # stopped, not finished: a pipeline must not archive it
    assert f"{signal.Signals(sig).name} received" in out and f"stopped by {signal.Signals(sig).name}" in out
    step = read_checkpoint(last)["global_step"]
    assert 5 <= step < 400
    assert f"step {step}  validation" not in out  # a stop between validation steps does not validate


@pytest.mark.slow
def test_kill_9_then_resume_auto(tmp_path, shared_cache):
    first = tmp_path / "outputs" / "train" / "smoke" / "runs" / "first"  # where resume=auto looks
    proc = start_training(tmp_path, shared_cache, first)
    last = first / "checkpoints" / "last.ckpt"
    wait_for(last, proc)
    time.sleep(1.0)
    proc.kill()
    proc.wait()
    saved = read_checkpoint(last)["global_step"]  # readable: never half-written
    resumed = subprocess.run(
        [sys.executable, "-m", "seqlab", "train", *SMOKE, f"trainer.max_steps={saved + 5}", "train.resume=auto",
         "train.checkpoint_every_n_steps=5", f"hydra.run.dir={tmp_path / 'run2'}",
         f"paths.log_dir={tmp_path / 'outputs'}", f"paths.cache_dir={shared_cache}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stdout + resumed.stderr
    assert read_checkpoint(tmp_path / "run2" / "checkpoints" / "last.ckpt")["global_step"] == saved + 5


def test_odd_inputs_through_tokenizer_and_decoding(make_cfg, tmp_path):
    result = train(make_cfg("train", [*SMOKE, "trainer.max_steps=3"]))
    model, tokenizer, _ = load_for_inference(result["last"])
    odd = ["", "🙂🚀 emoji only", "שלום עולם, مرحبا", "混合 scripts ñ é", "palabra " * 400, " ", "Dios."]
    examples = [Example(str(i), text, "reference") for i, text in enumerate(odd)]
    for cfg in (DecodingConfig(max_length=8), DecodingConfig(method="beam", num_beams=3, max_length=8),
                DecodingConfig(method="sample", n_best=2, top_p=0.9, max_length=8)):
        records, metrics = evaluate(model, tokenizer, examples, cfg, EvalSettings())
        assert len(records) == len(odd) and metrics["n_truncated_sources"] == 1
        one, _ = evaluate(model, tokenizer, examples[1:2], cfg, EvalSettings())  # a batch of one
        assert one[0].hypothesis == records[1].hypothesis
