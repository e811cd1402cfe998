"""`metrics=[...]` chooses the text metrics of an evaluation: chrF++ and TER by sacreBLEU, with signatures and
intervals; a finished setting asked for a metric it lacks is evaluated again; a wrong name fails first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sacrebleu

from seqlab.analysis.compare import compare, from_result_dir
from seqlab.app.evaluate import run_evaluation
from seqlab.config import ConfigError
from seqlab.metrics import keys as K
from seqlab.tracking.report import markdown_table


def test_ter_and_chrfpp_are_chosen_scored_and_added_later(make_cfg, smoke_checkpoint):
    common = [f"ckpt={smoke_checkpoint}", "logger=none", "limit=12", "decoding.max_length=6", "n_bootstrap=50",
              "score_references=false"]
    payload = run_evaluation(make_cfg("eval", [*common, "metrics=[ter,chrfpp]"]))
    metrics = payload["metrics"]
    assert {K.TER, K.CHRFPP, K.ci(K.TER), K.ci(K.CHRFPP), "ter_signature", "chrfpp_signature"} <= set(metrics)
    assert not {K.BLEU, K.CHRF, K.ROUGE1} & set(metrics)
    cfg = make_cfg("eval", [*common, "metrics=[ter,chrfpp]"])
    (hyp_file,) = Path(cfg.results_dir).glob("**/hypotheses.jsonl")
    rows = [json.loads(line) for line in hyp_file.read_text().splitlines()]
    hyps, refs = [r["hypothesis"] for r in rows], [[r["reference"] for r in rows]]
    assert metrics[K.TER] == pytest.approx(sacrebleu.corpus_ter(hyps, refs).score)
    assert metrics[K.CHRFPP] == pytest.approx(sacrebleu.corpus_chrf(hyps, refs, word_order=2).score)
    low, high = metrics[K.ci(K.TER)]
    assert low <= high

    assert run_evaluation(cfg)["status"] == "skipped"  # the same metrics: already evaluated
    again = run_evaluation(make_cfg("eval", [*common, "metrics=[ter,rouge]"]))  # ROUGE is missing: evaluated
    assert again["status"] == "ok" and K.ROUGE1 in again["metrics"] and K.TER in again["metrics"]
    head, _, row = markdown_table([again]).split("\n")
    assert "| ter [95% CI] | rouge1 [95% CI] |" in head and f"| {again['metrics'][K.TER]:.2f} [" in row
    assert f"| {again['metrics'][K.ROUGE1]:.2f} [" in row  # ROUGE's interval too, where evaluate computed it

    system = from_result_dir(hyp_file.parent)
    report = compare([system], n_ar=0, metrics=("ter",))
    assert report.intervals[system.name]["ter"].score == pytest.approx(again["metrics"][K.TER])

    with pytest.raises(ConfigError, match=r"eval\.metrics=\['bleu', 'meteor'\]: unknown \['meteor'\]"):
        run_evaluation(make_cfg("eval", [*common, "metrics=[bleu,meteor]"]))
