"""Each evaluated source's length in subword tokens: recorded by `seqlab evaluate` (the archive keeps them
beside the references: seqlab.app.runner)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqlab.app.evaluate import run_evaluation
from seqlab.checkpoint import load_for_inference
from seqlab.metrics import keys as K


def test_evaluate_records_each_sources_length_as_the_buckets_count_it(make_cfg, smoke_checkpoint):
    cfg = make_cfg("eval", [f"ckpt={smoke_checkpoint}", "logger=none", "limit=12", "decoding.max_length=6",
                            "n_bootstrap=0"])
    payload = run_evaluation(cfg)
    (hyp_file,) = Path(cfg.results_dir).glob("**/hypotheses.jsonl")
    rows = [json.loads(line) for line in hyp_file.read_text().splitlines()]
    model, tokenizer, _ = load_for_inference(smoke_checkpoint)
    pieces = tokenizer.src.encode([r["source"] for r in rows])  # sentencepiece alone: no EOS, no truncation
    longest = model.cfg.max_positions - 1  # a longer source is cut to this and its EOS
    assert [r["source_tokens"] for r in rows] == [min(len(p), longest) for p in pieces]
    shares = {b: payload["metrics"][K.bucket(K.SHARE, b)] for b, _, _ in K.LENGTH_BUCKETS}
    assert sum(shares.values()) == pytest.approx(100.0)
    assert shares["src_17_32"] == pytest.approx(100 * sum(17 <= len(p) <= 32 for p in pieces) / len(rows))
