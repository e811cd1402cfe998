"""Speculative decoding through the evaluation stage: the same hypotheses as plain greedy search, with the
draft's acceptance in the record, from a draft checkpoint on disk or from prompt lookup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqlab.app.evaluate import run_evaluation
from seqlab.config import ConfigError


def hypotheses(cfg, label: str) -> list[str]:
    folders = [p.parent for p in Path(cfg.results_dir).glob(f"**/{label}-*/metrics.json")]
    assert len(folders) == 1, folders
    return [json.loads(line)["hypothesis"] for line in (folders[0] / "hypotheses.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("draft", ["lookup", "ckpt"])
def test_speculative_evaluation_gives_greedy_hypotheses_and_records_its_acceptance(make_cfg, smoke_checkpoint,
                                                                                  tmp_path, draft):
    common = [f"ckpt={smoke_checkpoint}", "logger=none", "decoding=greedy", "decoding.max_length=16", "limit=8",
              "n_bootstrap=0", "score_references=false", "engine=seqlab"]
    plain = make_cfg("eval", common, out=tmp_path / "plain")
    assert run_evaluation(plain)["label"] == "greedy"
    setting = "lookup" if draft == "lookup" else f"'ckpt:{smoke_checkpoint}'"
    spec = make_cfg("eval", [*common, f"decoding.draft={setting}", "decoding.draft_tokens=3"], out=tmp_path / "spec")
    payload = run_evaluation(spec)
    label, metrics = payload["label"], payload["metrics"]
    assert label == ("greedy_lookup3" if draft == "lookup" else "greedy_draft3")
    assert hypotheses(spec, label) == hypotheses(plain, "greedy")
    assert 0.0 <= metrics["draft_acceptance"] <= 1.0 and metrics["draft_tokens_per_call"] >= 1.0
    if draft == "ckpt":  # the model drafting for itself keeps every proposal
        assert metrics["draft_acceptance"] == 1.0


def test_a_missing_draft_checkpoint_is_refused_by_name(make_cfg, smoke_checkpoint, tmp_path):
    cfg = make_cfg("eval", [f"ckpt={smoke_checkpoint}", "logger=none", "decoding=greedy", "limit=2",
                            f"decoding.draft='ckpt:{tmp_path}/none.ckpt'", "engine=seqlab"])
    with pytest.raises(ConfigError, match="decoding.draft=ckpt:.*none.ckpt: checkpoint not found"):
        run_evaluation(cfg)
