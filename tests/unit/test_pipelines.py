"""The experiments as pipelines: stages resolve to fixed configs, a stage is skipped when its archived result
has the same digest, a changed decoding reruns only its evaluation, a failed stage is never marked done,
and every generated table in the docs equals what rendering its archive gives now."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import pipelines.core
import pipelines.run
from pipelines import PIPELINES
from pipelines.core import Pipeline, Stage, Table
from pipelines.render import render
from pipelines.run import PipelineError, execute, plan
from pipelines.tables import decodings_table

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ("experiment=smoke", "trainer.max_steps=2", "trainer.max_time=null", "trainer.precision=32")
EVAL = ("split=test", "precision=fp32", "engine=seqlab")


class FakeSeqlab:
    """`seqlab train` and `seqlab evaluate` as a pipeline calls them, leaving the files they leave."""

    def __init__(self, fail: str | None = None) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.fail = fail

    def __call__(self, command: str, *args: str) -> bool:
        self.calls.append((command, *args))
        values = dict(a.split("=", 1) for a in args if "=" in a)
        if self.fail and any(self.fail in a for a in args):
            return False
        if command == "train":
            where = Path(values["hydra.run.dir"])
            (where / "csv").mkdir(parents=True, exist_ok=True)
            (where / "checkpoints").mkdir(exist_ok=True)
            (where / "csv" / "metrics.csv").write_text("epoch,step,val/loss\n0,0,5.0\n0,1,4.5\n")
            return True
        where = Path(values["results_dir"]) / "run" / "setting"
        where.mkdir(parents=True, exist_ok=True)
        bleu = 20.0 + float(values.get("decoding.length_penalty", 1.0))
        (where / "metrics.json").write_text(json.dumps({
            "status": "ok", "label": values["decoding"], "decoding": {"method": values["decoding"]},
            "metrics": {"bleu": bleu, "bleu_ci": [bleu - 1, bleu + 1]}, "settings": {"precision": "fp32"},
            "engine": "seqlab", "checkpoint": {"step": 2}}))
        return True

    def stages(self) -> list[str]:
        return [Path(dict(a.split("=", 1) for a in c[1:] if "=" in a).get("hydra.run.dir")
                     or dict(a.split("=", 1) for a in c[1:] if "=" in a)["results_dir"]).name for c in self.calls]


def toy(beam: tuple[str, ...] = ()) -> Pipeline:
    return Pipeline("toy", "a toy", (Stage("train", "train", TRAIN),
                                     Stage("greedy", "evaluate", ("decoding=greedy", *EVAL), after="train"),
                                     Stage("beam", "evaluate", ("decoding=beam", *EVAL, *beam), after="train")),
                    (Table("toy", decodings_table(("bleu",)), "doc.md"),))


@pytest.fixture
def places(tmp_path, monkeypatch):
    monkeypatch.setattr(pipelines.core, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(pipelines.run, "OUTPUTS", tmp_path / "outputs")
    return tmp_path


def test_every_experiment_resolves_to_fixed_stages():
    for pipeline in PIPELINES.values():
        planned = plan(pipeline)
        assert [p.stage.name for p in planned] == [s.name for s in pipeline.stages]
        digests = [p.digest for p in planned if p.digest is not None]
        assert len(set(digests)) == len(digests)


def test_nothing_changed_reruns_nothing_and_a_changed_decoding_only_its_evaluation(places):
    fake = FakeSeqlab()
    assert execute(toy(), runner=fake) == [] and fake.stages() == ["train", "greedy", "beam"]
    record = json.loads((places / "results" / "toy" / "beam.json").read_text())
    assert record["result"]["metrics"]["bleu"] == 21.0 and record["manifest"]["commit"]
    assert {"cpu", "cpu_flags", "torch", "precision", "engine", "wall_s", "clean", "date", "command"} <= set(
        record["manifest"])
    fake.calls.clear()
    assert execute(toy(), runner=fake) == [] and fake.calls == []
    assert execute(toy(("decoding.length_penalty=0.6",)), runner=fake) == [] and fake.stages() == ["beam"]
    fake.calls.clear()
    import shutil
    shutil.rmtree(places / "outputs")  # a fresh machine: the checkpoint is gone, so the training runs again
    assert execute(toy(("decoding.length_penalty=0.8",)), runner=fake) == [] and fake.stages() == ["train", "beam"]


def test_a_failed_stage_is_never_marked_done_and_its_followers_wait(places):
    fake = FakeSeqlab(fail="experiment=smoke")
    assert execute(toy(), runner=fake) == ["train", "greedy", "beam"]
    assert not (places / "results" / "toy").exists()


def test_stages_that_would_differ_between_machines_are_refused():
    timed = Pipeline("t", "", (Stage("train", "train", ("experiment=mt_bible_small",)),))  # 25 minutes
    with pytest.raises(PipelineError, match=r"trainer.max_time=null \(now 00:00:25:00\)"):
        plan(timed)
    probed = Pipeline("p", "", (Stage("train", "train", (*TRAIN[:-1], "trainer.precision=auto")),))
    with pytest.raises(PipelineError, match="trainer.precision=auto"):
        plan(probed)


def test_tables_render_between_markers_and_a_hand_edit_is_caught(places):
    pipeline = toy()
    execute(pipeline, runner=FakeSeqlab())
    doc = places / "doc.md"
    doc.write_text("# Toy\n\n<!-- table:toy -->\nold\n<!-- /table:toy -->\n\nprose\n")
    assert render([pipeline], root=places) == ["doc.md: table toy"]
    text = doc.read_text()
    assert "| greedy | 21.00 [20.00, 22.00] |" in text and text.endswith("<!-- /table:toy -->\n\nprose\n")
    assert render([pipeline], check=True, root=places) == []
    doc.write_text(text.replace("21.00 [20.00", "21.50 [20.00"))
    assert render([pipeline], check=True, root=places) == ["doc.md: table toy"]


def test_every_generated_table_in_the_docs_is_current():
    assert render(list(PIPELINES.values()), check=True) == []
