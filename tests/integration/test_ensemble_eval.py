"""`seqlab evaluate ckpt=A ensemble=[B,...]`: checkpoints decoded as one model, each checked against the first
before anything is decoded; the ensemble's results get their own folder and label."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from seqlab.app.evaluate import run_evaluation
from seqlab.config import ConfigError


def variant_of(checkpoint: Path, out: Path, change) -> Path:
    """A copy of the checkpoint file with `change(state)` applied."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    change(state)
    torch.save(state, out)
    return out


def perturbed(state) -> None:
    g = torch.Generator().manual_seed(0)
    for value in state["state_dict"].values():
        if value.is_floating_point():
            value.add_(0.5 * torch.randn(value.shape, generator=g))


def other_tokenizer(state) -> None:
    tok = state["seqlab"]["tokenizer"]
    tok["tgt_model"] = tok["src_model"]  # the same pieces, stored as a separate target model: another digest


def test_an_ensemble_decodes_as_one_and_refuses_another_tokenizer(make_cfg, smoke_checkpoint, tmp_path):
    common = [f"ckpt={smoke_checkpoint}", "logger=none", "limit=8", "decoding.max_length=6", "n_bootstrap=0",
              "metrics=[bleu]"]
    single = run_evaluation(make_cfg("eval", common))
    twice = run_evaluation(make_cfg("eval", [*common, f"ensemble=[{smoke_checkpoint}]"]))
    assert twice["label"] == f"{single['label']}_ens2" and twice["ensemble"]["rule"] == "mean_prob"
    rows = {}
    for payload in (single, twice):
        (folder,) = [p.parent for p in Path(make_cfg("eval", common).results_dir).glob("**/metrics.json")
                     if json.loads(p.read_text())["label"] == payload["label"]]
        rows[payload["label"]] = [json.loads(line)["hypothesis"] for line in (folder / "hypotheses.jsonl").open()]
    assert rows[single["label"]] == rows[twice["label"]]  # a model twice: the same mixture

    other = variant_of(smoke_checkpoint, tmp_path / "other.ckpt", perturbed)
    mixed = run_evaluation(make_cfg("eval", [*common, f"ensemble=[{other}]", "ensemble_rule=mean_logprob"]))
    assert mixed["status"] == "ok" and mixed["label"].endswith("_ens2_meanlp")

    wrong = variant_of(smoke_checkpoint, tmp_path / "wrong.ckpt", other_tokenizer)
    with pytest.raises(ConfigError, match=r"eval\.ensemble: .*wrong\.ckpt has another tokenizer"):
        run_evaluation(make_cfg("eval", [*common, f"ensemble=[{wrong}]"]))
    with pytest.raises(ConfigError, match="engine=ctranslate2 decodes one model"):
        run_evaluation(make_cfg("eval", [*common, f"ensemble=[{other}]", "engine=ctranslate2"]))
