"""Each evaluated source's length in subword tokens: recorded by `seqlab evaluate`, archived by the study,
and recovered from a checkpoint for an archive decoded before evaluations recorded it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqlab.analysis.study import Record, load_source_tokens, write_record
from seqlab.analysis.study_lengths import archive_source_lengths
from seqlab.app.evaluate import run_evaluation
from seqlab.app.study import main as study_main
from seqlab.checkpoint import load_for_inference
from seqlab.data.config import DataConfig
from seqlab.inference.testset import TestSet
from seqlab.metrics import by_source_length, rouge_scores, sacrebleu_scores
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


def test_an_archive_recovers_its_source_lengths_from_a_checkpoint_of_its_study(smoke_checkpoint, tmp_path):
    model, tokenizer, info = load_for_inference(smoke_checkpoint)
    examples = TestSet(split="test").examples(DataConfig.from_dict(info.data_config))
    refs = [e.target for e in examples]
    longest = model.cfg.max_positions - 1
    lengths = [min(len(p), longest) for p in tokenizer.src.encode([e.source for e in examples])]
    hyps = [" ".join(r.split()[::2]) for r in refs]  # any hypotheses: the buckets are the sources'
    metrics = {**sacrebleu_scores(hyps, refs), **rouge_scores(hyps, refs), **by_source_length(hyps, refs, lengths)}
    record = Record("baseline", 0, "beam5", metrics, [(300, 3.0)], 0, 300, {}, hypotheses=hyps)
    archive = tmp_path / "archive"
    archive.mkdir()
    write_record(archive, record, refs)  # as an evaluation that did not record lengths left it
    assert load_source_tokens(archive) is None
    assert study_main(["--recipe", "trained", "--archive", str(archive), "--dir", str(tmp_path / "runs"),
                       "--source-lengths", str(smoke_checkpoint)]) == 0
    assert load_source_tokens(archive) == lengths

    other = tmp_path / "other"
    other.mkdir()
    wrong = by_source_length(hyps, refs, [n + 20 for n in lengths])  # scored on other buckets
    write_record(other, Record("baseline", 0, "greedy", wrong, [], 0, 0, {}, hypotheses=hyps), refs)
    with pytest.raises(ValueError, match="baseline-seed0.greedy's .* not the lengths its evaluation counted"):
        archive_source_lengths(other, smoke_checkpoint)
    assert load_source_tokens(other) is None  # nothing written

    elsewhere = tmp_path / "elsewhere"  # decoded on another test set
    elsewhere.mkdir()
    write_record(elsewhere, Record("baseline", 0, "greedy", {}, [], 0, 0, {}, hypotheses=hyps[1:]), refs[1:])
    with pytest.raises(ValueError, match="its test split is not the one .*test.references.txt.gz holds"):
        archive_source_lengths(elsewhere, smoke_checkpoint)
