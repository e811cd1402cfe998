"""Evaluation on other test sets: plain-text files with several references, and the Bible's second reference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sacrebleu

from seqlab.app.evaluate import run_evaluation
from seqlab.config import ConfigError


def test_plain_text_test_set_with_two_references(make_cfg, smoke_checkpoint, tmp_path):
    src, ref1, ref2 = (tmp_path / n for n in ("src.txt", "ref1.txt", "ref2.txt"))
    src.write_text("En el principio.\nY dijo Dios.\nSea la luz.\n")
    ref1.write_text("In the beginning.\nAnd God said.\nLet there be light.\n")
    ref2.write_text("At the start.\nGod spoke.\nLight, please.\n")
    common = [f"ckpt={smoke_checkpoint}", "logger=none", "decoding.max_length=8", "n_bootstrap=0"]
    payload = run_evaluation(make_cfg("eval", [*common, f"source={src}", f"references=[{ref1},{ref2}]"]))
    run_evaluation(make_cfg("eval", [*common, "limit=3"]))  # the checkpoint's own test split
    assert payload["metrics"]["n_references"] == 2 and payload["metrics"]["n_examples"] == 3
    folders = {p.parent for p in Path(make_cfg("eval", common).results_dir).glob("**/metrics.json")}
    assert len(folders) == 2, "another test set never overwrites the checkpoint's own results"
    hyp_file = next(f / "hypotheses.jsonl" for f in folders
                    if json.loads((f / "metrics.json").read_text()).get("test_set", {}).get("source"))
    rows = [json.loads(line) for line in hyp_file.read_text().splitlines()]
    hyps = [r["hypothesis"] for r in rows]
    assert [r["references"] for r in rows][1] == ["And God said.", "God spoke."]
    refs = [ref1.read_text().splitlines(), ref2.read_text().splitlines()]
    assert payload["metrics"]["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, refs).score)
    assert payload["metrics"]["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, refs).score)


def test_bible_second_reference_and_bad_test_sets(make_cfg, smoke_checkpoint, tmp_path):
    common = [f"ckpt={smoke_checkpoint}", "logger=none", "decoding.max_length=8", "limit=4", "n_bootstrap=0"]
    payload = run_evaluation(make_cfg("eval", [*common, "extra_references=[en-kjv]"]))
    assert payload["metrics"]["n_references"] == 2 and payload["test_set"]["extra_references"] == ["en-kjv"]
    with pytest.raises(ConfigError, match="references="):
        run_evaluation(make_cfg("eval", [*common, f"source={tmp_path / 'x.txt'}"]))


def test_another_corpus_config_by_name_or_as_a_config(make_cfg, smoke_checkpoint, tmp_path):
    common = [f"ckpt={smoke_checkpoint}", "logger=none", "decoding.max_length=6", "limit=3", "n_bootstrap=0"]
    by_name = run_evaluation(make_cfg("eval", [*common, "corpus=debian_summaries"]))
    assert by_name["test_set"]["corpus"]["name"] == "debian_summaries" and by_name["metrics"]["n_examples"] == 3
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps({"id": str(i), "src": f"Dios {i}", "tgt": f"God {i}"}) + "\n" for i in range(4)))
    own = run_evaluation(make_cfg("eval", [*common, f"corpus={{name:mine,kind:files,task:translation,"
                                                     f"files:{{test:'{data}'}},src_field:src,tgt_field:tgt}}"]))
    assert own["metrics"]["n_examples"] == 3 and own["test_set"]["corpus"]["name"] == "mine"
    with pytest.raises(ConfigError, match="corpus=nope"):
        run_evaluation(make_cfg("eval", [*common, "corpus=nope"]))


def test_report_inspects_a_few_sentences_of_each_evaluated_checkpoint(make_cfg, smoke_checkpoint):
    from seqlab.app.report import inspections
    from seqlab.tracking.results import load_results

    cfg = make_cfg("eval", [f"ckpt={smoke_checkpoint}", "logger=none", "decoding.max_length=6", "limit=3",
                            "n_bootstrap=0"])
    run_evaluation(cfg)
    section = inspections(load_results(Path(cfg.results_dir)), sentences=2)
    assert section.count("<img") == 2 and "Inside" in section and "greedy, each piece with its probability" in section
