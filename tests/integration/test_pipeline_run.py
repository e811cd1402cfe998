"""A pipeline end to end with the real seqlab: a smoke training, two decodings and their paired tests, each
archived with its manifest; the table renders from the archive alone; a second run reruns nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import seqlab.app.runner
import seqlab.pipeline.core
from pipelines.core import compared
from pipelines.tables import decodings_table, paired_tests, records
from seqlab.app.runner import execute
from seqlab.pipeline.core import Pipeline, Stage, Table

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_pipeline_trains_decodes_compares_and_archives(tmp_path, monkeypatch):
    monkeypatch.setattr(seqlab.pipeline.core, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(seqlab.app.runner, "OUTPUTS", tmp_path / "outputs")
    where = [f"paths.cache_dir={tmp_path / 'cache'}", f"paths.log_dir={tmp_path / 'logs'}"]
    decode = ("split=test", "limit=12", "decoding.max_length=10", "precision=fp32", "engine=seqlab", "logger=none",
              "n_bootstrap=50", *where)
    pipeline = Pipeline("smoke", "a smoke experiment", (
        Stage("train", "train", ("experiment=smoke", "trainer.max_steps=3", "trainer.max_time=null",
                                 "trainer.precision=32", "train.quick_eval_size=0", "logger=csv", *where)),
        Stage("greedy", "evaluate", ("decoding=greedy", *decode), after="train"),
        Stage("beam", "evaluate", ("decoding=beam", *decode), after="train"),
        compared("vs_greedy", "greedy", ("beam",))), (Table("smoke", decodings_table(("bleu", "chrf")), "x.md"),))
    calls: list[str] = []

    def run_seqlab(*args: str) -> bool:
        calls.append(args[0])
        extra = ["--n-ar", "100"] if args[0] == "compare" else []
        return subprocess.run([sys.executable, "-m", "seqlab", *args, *extra], cwd=ROOT, timeout=600).returncode == 0

    assert execute(pipeline, command=run_seqlab) == [] and calls == ["train", "evaluate", "evaluate", "compare"]
    found = records(tmp_path / "results" / "smoke")
    assert set(found) == {"train", "greedy", "beam", "vs_greedy"}
    assert found["train"]["manifest"]["updates"] == 3 and found["greedy"]["result"]["metrics"]["n_examples"] == 12
    assert found["beam"]["manifest"]["engine"] == "seqlab" and found["beam"]["manifest"]["precision"] == "fp32"
    bleu = paired_tests(found, "vs_greedy")["beam"]["bleu"]
    assert bleu["delta"] == (found["beam"]["result"]["metrics"]["bleu"] - found["greedy"]["result"]["metrics"]["bleu"])
    table = pipeline.tables[0].render(tmp_path / "results" / "smoke")
    assert table.count("\n| ") == 2 and "| 3 |" in table  # one row per decoding, each of the 3-update model
    json.loads((tmp_path / "results" / "smoke" / "beam.json").read_text())
    calls.clear()
    assert execute(pipeline, command=run_seqlab) == [] and calls == []  # nothing changed: nothing reruns


def test_only_runs_the_named_stage_and_what_it_reads(tmp_path, monkeypatch, capsys):
    """--only greedy: the training it reads and itself; the other decoding and the comparison are left."""
    import pytest

    from seqlab.app.runner import PipelineError

    monkeypatch.setattr(seqlab.pipeline.core, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(seqlab.app.runner, "OUTPUTS", tmp_path / "outputs")
    train = ("experiment=smoke", "trainer.max_steps=3", "trainer.max_time=null", "trainer.precision=32")
    decode = ("split=test", "precision=fp32", "engine=seqlab")
    pipeline = Pipeline("smoke", "a smoke experiment", (
        Stage("train", "train", train), Stage("greedy", "evaluate", ("decoding=greedy", *decode), after="train"),
        Stage("beam", "evaluate", ("decoding=beam", *decode), after="train"),
        compared("vs_greedy", "greedy", ("beam",))), ())
    assert execute(pipeline, dry_run=True, only=frozenset({"greedy"})) == []
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in lines] == ["== train", "== greedy", "== beam", "== vs_greedy"]
    assert "would run" in lines[0] and "would run" in lines[1]
    assert lines[2].endswith("left as it is (--only)") and lines[3].endswith("left as it is (--only)")
    with pytest.raises(PipelineError, match=r"--only 'bleu': no such stage"):
        execute(pipeline, dry_run=True, only=frozenset({"bleu"}))
