"""W&B offline: predictions tables, evaluation runs in the training run's group, resumed runs keep their id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqlab.app.evaluate import run_evaluation
from seqlab.app.train import train
from seqlab.checkpoint import load_for_inference
from seqlab.config import ConfigError

SMOKE = ["experiment=smoke", "logger=wandb", "logger.mode=offline", "train.quick_eval_size=0"]


@pytest.mark.slow  # the evaluation's predictions table is the default run's W&B table test
def test_validation_logs_a_table_of_the_quick_eval_sentences(make_cfg, tmp_path, capfd):
    train(make_cfg("train", [*SMOKE, "train.quick_eval_size=3", "trainer.max_steps=6"], out=tmp_path / "a"))
    assert "anonymous" not in capfd.readouterr().err  # W&B's warning for a setting it no longer has
    (run,) = offline_runs(tmp_path / "a")
    tables = sorted(run.glob("files/media/table/val/quick_eval_*.table.json"))
    assert len(tables) == 2  # validations at steps 3 and 6
    data = json.loads(tables[0].read_text())
    assert data["columns"] == ["id", "source", "reference", "hypothesis"] and len(data["data"]) == 3


def offline_runs(folder: Path) -> list[Path]:
    return sorted(folder.glob("**/wandb/offline-run-*"))


def run_record(run: Path) -> bytes:
    """The run's transaction log, once W&B's service has written all of it: the service writes it in its
    own process, and a file read right after `wandb.finish()` was once seen holding only its header.
    Shutting the service down waits for it to close every file (a later run starts a new one)."""
    import wandb

    wandb.teardown()
    (wandb_file,) = run.glob("run-*.wandb")
    return wandb_file.read_bytes()


def test_training_group_eval_job_type_predictions_table_and_resume(make_cfg, tmp_path, monkeypatch):
    from lightning.pytorch.loggers import WandbLogger

    started: list[dict] = []
    real_init = WandbLogger.__init__

    def recording_init(self, *args, **kwargs):
        started.append(kwargs)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(WandbLogger, "__init__", recording_init)
    first = train(make_cfg("train", [*SMOKE, "trainer.max_steps=2", "logger.group=study-x"], out=tmp_path / "a"))
    (train_run,) = offline_runs(tmp_path / "a")
    run_id = (tmp_path / "a" / "wandb-run-id").read_text()
    assert train_run.name.endswith(run_id) and b"study-x" in run_record(train_run)
    assert load_for_inference(first["last"])[2].tracking == {"group": "study-x", "run_id": run_id,
                                                             "log_checkpoints": False}

    # A resumed training continues the same W&B run.
    train(make_cfg("train", [*SMOKE, "trainer.max_steps=4", f"train.resume={first['last']}", "logger.group=study-x"],
                   out=tmp_path / "b"))
    (resumed,) = offline_runs(tmp_path / "b")
    assert resumed.name.endswith(run_id)

    # An evaluation joins the training's group, as job_type eval, and logs its predictions as a table.
    cfg = make_cfg("eval", [f"ckpt={first['last']}", "logger=wandb", "logger.mode=offline", "limit=3",
                            "decoding.max_length=6", "n_bootstrap=0"])
    run_evaluation(cfg)
    (eval_run,) = offline_runs(Path(cfg.results_dir))
    assert b"study-x" in run_record(eval_run)
    assert [(k["job_type"], k["group"]) for k in started] == [("train", "study-x"), ("train", "study-x"),
                                                             ("eval", "study-x")]
    assert started[1]["id"] == run_id and started[1]["resume"] == "allow"
    (table,) = eval_run.glob("files/media/table/predictions_*.table.json")
    data = json.loads(table.read_text())
    assert data["columns"] == ["id", "source", "reference", "hypothesis", "logprob", "other_hypotheses"]
    hyps = [json.loads(line)["hypothesis"] for line in
            next(Path(cfg.results_dir).glob("**/hypotheses.jsonl")).read_text().splitlines()]
    assert [row[3] for row in data["data"]] == hyps and len(hyps) == 3
    assert len(list(eval_run.glob("files/media/images/attention_*.png"))) == 2  # alignments of 2 sources


def test_checkpoints_as_model_artifacts_and_evaluation_lineage(make_cfg, tmp_path):
    result = train(make_cfg("train", [*SMOKE, "trainer.max_steps=3", "logger.log_checkpoints=true"],
                            out=tmp_path / "a"))
    (train_run,) = offline_runs(tmp_path / "a")
    run_id = (tmp_path / "a" / "wandb-run-id").read_text()
    record = run_record(train_run)
    assert f"model-{run_id}".encode() in record and b"best" in record and b"latest" in record
    info = load_for_inference(result["best"])[2]
    assert info.tracking["log_checkpoints"] is True
    cfg = make_cfg("eval", [f"ckpt={result['best']}", "logger=wandb", "logger.mode=offline", "limit=2",
                            "decoding.max_length=5", "n_bootstrap=0"])
    run_evaluation(cfg)
    (eval_run,) = offline_runs(Path(cfg.results_dir))
    assert f"model-{run_id}:best".encode() in run_record(eval_run)  # the artifact it evaluated, in its config


def test_one_label_names_the_folder_the_record_and_the_run_and_an_earlier_folder_is_found(make_cfg,
                                                                                         smoke_checkpoint):
    """`decoding=beam` composes a config whose raw method is `beam`; the setting's one label is the typed
    decoding's, beam5_lp1, in the folder's name, the record and the W&B run's name. A folder written under
    the raw method's name (as earlier code did) is the same setting: renamed, found and skipped."""
    overrides = [f"ckpt={smoke_checkpoint}", "decoding=beam", "logger=wandb", "logger.mode=offline", "limit=2",
                 "decoding.max_length=5", "n_bootstrap=0"]
    cfg = make_cfg("eval", overrides)
    payload = run_evaluation(cfg)
    (folder,) = [p.parent for p in Path(cfg.results_dir).glob("**/metrics.json")]
    assert payload["label"] == "beam5_lp1" and folder.name.startswith("beam5_lp1-")
    assert json.loads((folder / "metrics.json").read_text())["label"] == "beam5_lp1"
    (eval_run,) = offline_runs(folder)
    assert f"{payload['checkpoint']['run_name']}/beam5_lp1".encode() in run_record(eval_run)

    earlier = folder.with_name("beam-" + folder.name.removeprefix("beam5_lp1-"))
    folder.rename(earlier)
    again = run_evaluation(make_cfg("eval", overrides))
    assert again["status"] == "skipped" and Path(again["path"]) == folder and folder.is_dir()
    assert not earlier.exists()


def test_a_value_that_does_not_type_is_recorded_under_the_raw_label(make_cfg, smoke_checkpoint):
    cfg = make_cfg("eval", [f"ckpt={smoke_checkpoint}", "decoding=top_p", "decoding.top_p=1.5", "limit=2",
                            "logger=none"])
    with pytest.raises(ConfigError, match="top_p"):
        run_evaluation(cfg)
    (metrics,) = Path(cfg.results_dir).glob("**/metrics.json")
    record = json.loads(metrics.read_text())
    assert record["status"] == "failed" and record["label"] == "sample" and metrics.parent.name.startswith("sample-")
