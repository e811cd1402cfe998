"""Fine-tuning with low-rank adapters end to end: `seqlab train train.init_from=... train.lora.r=4` trains the
adapters alone (every other weight stays the pretrained one), resumes to the straight run's weights, and its
checkpoint decodes as the merged model."""

from __future__ import annotations

import pytest
import torch

from seqlab.app.train import train
from seqlab.checkpoint import load_for_inference, read_checkpoint
from seqlab.decoding import DecodingConfig
from seqlab.inference.text import translate
from seqlab.model.adapters import BASE, has_adapters
from seqlab.train.average import average_checkpoints

pytest.importorskip("peft")

SMOKE = ["experiment=smoke", "logger=none"]


def model_weights(path) -> dict[str, torch.Tensor]:
    return {k.removeprefix("model."): v for k, v in read_checkpoint(path)["state_dict"].items()
            if k.startswith("model.")}


def test_lora_fine_tuning_trains_the_adapters_only_resumes_and_decodes_merged(make_cfg, tmp_path, smoke_checkpoint):
    common = [*SMOKE, f"train.init_from={smoke_checkpoint}", "train.lora.r=4", "train.lora.targets=all",
              "model.dropout=0.1", "train.lora.dropout=0.1", "optim.lr=1e-2", "optim.warmup_steps=1",
              "train.quick_eval_size=0", "train.checkpoint_every_n_steps=2", "train.val_every_n_steps=3"]
    straight = train(make_cfg("train", [*common, "trainer.max_steps=4"], out=tmp_path / "straight"))
    first = train(make_cfg("train", [*common, "trainer.max_steps=2"], out=tmp_path / "first"))
    resumed = train(make_cfg("train", [*common, "trainer.max_steps=4", f"train.resume={first['last']}"],
                             out=tmp_path / "resumed"))
    a, b = model_weights(straight["last"]), model_weights(resumed["last"])
    assert a.keys() == b.keys() and max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-6
    pretrained = model_weights(smoke_checkpoint)
    for key, value in a.items():  # every weight but the adapters is the pretrained model's
        if ".lora_" not in key:
            assert torch.equal(value, pretrained[key.replace(BASE, ".")]), key
    assert any(".lora_B." in k and v.abs().max() > 0 for k, v in a.items()), "the adapters must have trained"
    assert read_checkpoint(resumed["last"])["seqlab"]["lora"]["r"] == 4
    merged, tokenizer, _ = load_for_inference(resumed["last"])
    assert set(merged.state_dict()) == set(load_for_inference(smoke_checkpoint)[0].state_dict())
    changed = max((merged.state_dict()[k] - pretrained[k]).abs().max().item() for k in pretrained)
    assert changed > 1e-4  # the adapters are in the merged weights
    hyps = translate(merged, tokenizer, ["a short source"], DecodingConfig(method="beam", num_beams=2, max_length=8))
    assert len(hyps) == 1
    # averaged as the models they decode as: merged first, then the mean
    averaged = average_checkpoints([first["last"], straight["last"]])
    assert not has_adapters(averaged["state_dict"]) and "optimizer_states" not in averaged
    torch.save(averaged, tmp_path / "avg.ckpt")
    mean, _, _ = load_for_inference(tmp_path / "avg.ckpt")
    early = load_for_inference(first["last"])[0].state_dict()
    for key, value in mean.state_dict().items():
        torch.testing.assert_close(value, (early[key] + merged.state_dict()[key]) / 2, rtol=0, atol=1e-6)
