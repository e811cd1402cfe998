"""Checkpoint averaging (fairseq's average_checkpoints) and the metric that picks best.ckpt."""

from __future__ import annotations

import pytest
import torch

from seqlab.app.average import main
from seqlab.app.train import train
from seqlab.checkpoint import CheckpointError, load_for_inference, read_checkpoint
from seqlab.config import ConfigError
from seqlab.train.average import average_checkpoints

SMOKE = ["experiment=smoke", "logger=none", "train.quick_eval_size=0"]


def test_average_of_the_last_two_checkpoints_is_their_mean_and_loads(make_cfg, tmp_path):
    result = train(make_cfg("train", [*SMOKE, "trainer.max_steps=6", "train.checkpoint_every_n_steps=2",
                                      "train.keep_last_checkpoints=2"], out=tmp_path / "run"))
    kept = sorted((tmp_path / "run" / "checkpoints").glob("step-*.ckpt"))
    assert [p.name for p in kept] == ["step-0000004.ckpt", "step-0000006.ckpt"]
    out = tmp_path / "avg.ckpt"
    assert main(["--out", str(out), *map(str, kept)]) == 0
    a, b, avg = (read_checkpoint(p) for p in (*kept, out))
    for key, value in avg["state_dict"].items():
        expected = (a["state_dict"][key].double() + b["state_dict"][key].double()) / 2
        assert torch.allclose(value.double(), expected.to(value.dtype).double(), atol=1e-7), key
    assert any(not torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    # every other piece is the newest checkpoint's: description, tokenizer, optimizer, loop state
    assert avg["global_step"] == b["global_step"] == 6 and avg["optimizer_states"] is not None
    assert {k: v for k, v in avg["seqlab"].items() if k != "averaged_from"} == b["seqlab"]
    model, tokenizer, info = load_for_inference(out)
    assert info.step == 6 and tokenizer.src_vocab_size == model.cfg.src_vocab_size
    assert result["step"] == 6


def test_average_refuses_different_models(make_cfg, tmp_path):
    one = train(make_cfg("train", [*SMOKE, "trainer.max_steps=2"], out=tmp_path / "a"))["last"]
    two = train(make_cfg("train", [*SMOKE, "trainer.max_steps=2", "model.d_ff=128"], out=tmp_path / "b"))["last"]
    with pytest.raises(CheckpointError, match="different model_config"):
        average_checkpoints([one, two])


def test_best_checkpoint_by_any_logged_metric(make_cfg, tmp_path):
    result = train(make_cfg("train", ["experiment=smoke", "logger=none", "train.quick_eval_size=4",
                                      "train.monitor=val/greedy_bleu", "train.monitor_mode=max"],
                            out=tmp_path / "run"))
    assert read_checkpoint(result["best"])["callbacks"]  # written by the val/greedy_bleu checkpoint callback
    assert any("val/greedy_bleu" in k for k in read_checkpoint(result["best"])["callbacks"])
    with pytest.raises(ConfigError, match="quick_eval_size=0"):
        train(make_cfg("train", [*SMOKE, "train.monitor=val/greedy_bleu"], out=tmp_path / "other"))
