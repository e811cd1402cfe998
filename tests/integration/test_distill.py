"""`seqlab distill`: the teacher's beam outputs on its training split as a corpus a student trains on (with
the teacher's tokenizer, so that it drafts for the teacher), resumable by shards, the validation and test sets
kept with their references."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest
from hydra.core.global_hydra import GlobalHydra

from seqlab.app.distill import run_distill
from seqlab.app.evaluate import run_evaluation
from seqlab.app.train import train
from seqlab.checkpoint import load_for_inference
from seqlab.config import ConfigError
from seqlab.data import DataConfig
from seqlab.data.corpora import load_split
from seqlab.decoding import DecodingConfig
from seqlab.inference.evaluation import decode_texts


def rows(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_distill_writes_a_corpus_resumes_by_shard_and_a_student_trains_on_it(make_cfg, smoke_checkpoint, tmp_path):
    out = tmp_path / "distilled"
    common = [f"ckpt={smoke_checkpoint}", f"out={out}", "limit=10", "shard_size=4", "decoding.max_length=12",
              "engine=seqlab"]
    first = run_distill(make_cfg("distill", common))
    assert first["status"] == "ok" and first["examples"] == 10 and first["decoded_now"] == 10
    train_rows = rows(out / "train.jsonl.gz")
    assert [set(r) for r in train_rows] == [{"id", "source", "target"}] * 10
    # the targets are the teacher's beam-5 outputs, read back by the corpus reader as a student's targets
    model, tokenizer, _ = load_for_inference(smoke_checkpoint)
    beam = DecodingConfig(method="beam", num_beams=5, max_length=12)
    decoded = decode_texts(model, tokenizer, [r["source"] for r in train_rows], beam, 8000)
    assert [r["target"] for r in train_rows] == [tokenizer.decode_target(h[0][0]) for h in decoded.hypotheses]
    corpus = DataConfig.from_dict({"corpus": {"name": "d", "kind": "embedded", "task": "translation",
                                              "path": str(out), "src_field": "source", "tgt_field": "target"}}).corpus
    assert [e.target for e in load_split(corpus, "train")] == [r["target"] for r in train_rows]
    test = rows(out / "test.jsonl.gz")
    assert len(test) > 0 and all(r["target"] for r in test)  # the real references

    (out / "shards" / "train-00002.jsonl.gz").unlink()  # a run cut in its last shard
    (out / "distill.json").unlink()
    again = run_distill(make_cfg("distill", common))
    assert again["decoded_now"] == 2 and rows(out / "train.jsonl.gz") == train_rows
    assert run_distill(make_cfg("distill", common))["status"] == "skipped"

    GlobalHydra.instance().clear()
    cfg = make_cfg("train", ["experiment=smoke", "logger=none", "train.quick_eval_size=0", "trainer.max_steps=2",
                             "data=distilled", f"data.corpus.path={out}", f"train.tokenizer_from={smoke_checkpoint}",
                             "model.decoder_layers=1"], out=tmp_path / "student")
    student = train(cfg)["last"]
    assert load_for_inference(student)[1].digest == tokenizer.digest  # the teacher's vocabulary
    # so the student drafts for its teacher: speculative greedy decoding gives the teacher's greedy outputs
    common = [f"ckpt={smoke_checkpoint}", "logger=none", "decoding=greedy", "limit=4", "n_bootstrap=0",
              "score_references=false", "decoding.max_length=12"]
    plain = run_evaluation(make_cfg("eval", common, out=tmp_path / "plain"))
    drafted = run_evaluation(make_cfg("eval", [*common, f"decoding.draft='ckpt:{student}'"], out=tmp_path / "spec"))
    assert drafted["metrics"]["bleu"] == plain["metrics"]["bleu"] and "draft_acceptance" in drafted["metrics"]


def test_a_folder_belongs_to_one_teacher_and_one_decoding(make_cfg, smoke_checkpoint, tmp_path):
    """Another teacher (here a copy of the checkpoint: another file) or another decoding on a finished or cut
    folder is refused naming both, before anything loads; force=true starts it over for the new one; an `out`
    that is a file and a teacher without a corpus are one-line refusals."""
    out = tmp_path / "distilled"
    common = [f"out={out}", "limit=6", "shard_size=4", "decoding.max_length=8", "engine=seqlab"]
    assert run_distill(make_cfg("distill", [f"ckpt={smoke_checkpoint}", *common]))["status"] == "ok"
    other = tmp_path / "other.ckpt"
    shutil.copy(smoke_checkpoint, other)
    with pytest.raises(ConfigError, match=f"holds the outputs of another teacher \\({smoke_checkpoint}"):
        run_distill(make_cfg("distill", [f"ckpt={other}", *common]))
    (out / "distill.json").unlink()  # cut: the first shard kept, the record not yet written
    (out / "shards" / "train-00001.jsonl.gz").unlink()
    with pytest.raises(ConfigError, match="holds the outputs of another decoding"):
        run_distill(make_cfg("distill", [f"ckpt={smoke_checkpoint}", *common, "decoding=greedy"]))
    redone = run_distill(make_cfg("distill", [f"ckpt={other}", *common, "force=true"]))
    assert redone["status"] == "ok" and redone["decoded_now"] == 6 and redone["teacher"] == str(other)
    assert json.loads((out / "owner.json").read_text())["teacher"] == str(other)
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ConfigError, match="a_file is a file; name a folder"):
        run_distill(make_cfg("distill", [f"ckpt={smoke_checkpoint}", f"out={tmp_path / 'a_file'}"]))
