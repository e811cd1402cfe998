"""Multiruns: one offline W&B run per job in one group; evaluation sweeps record failures and skip finished work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seqlab.analysis.study import load_records

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "HF_HUB_OFFLINE": "1"}


def run(args: list[str], cwd: Path = ROOT, timeout: int = 600, expect: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *args], cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == expect, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def paths(tmp: Path, cache: Path) -> list[str]:
    return [f"paths.log_dir={tmp / 'outputs'}", f"paths.cache_dir={cache}"]


@pytest.fixture(scope="module")
def smoke_ckpt(smoke_checkpoint, shared_cache) -> tuple[Path, Path]:
    """The session's smoke-trained run directory (its checkpoint's folder's parent) and the cache it used (the
    smoke tokenizer trained once); `seqlab train` itself runs as a command in the multirun tests."""
    return smoke_checkpoint.parent.parent, shared_cache


@pytest.mark.slow
def test_train_multirun_gives_one_offline_wandb_run_per_job_in_one_group(tmp_path, smoke_ckpt):
    _, cache = smoke_ckpt
    sweep = tmp_path / "sweep"
    run(["-m", "seqlab", "train", "-m", "experiment=smoke", "logger=wandb", "trainer.max_steps=2",
         "train.quick_eval_size=0", "model.norm_position=pre,post", "model.tie_embeddings=none,all",
         f"hydra.sweep.dir={sweep}", *paths(tmp_path, cache)])
    runs = sorted(sweep.glob("*/wandb/offline-run-*/run-*.wandb"))
    assert len(runs) == 4
    group = f"smoke-{sweep.name}".encode()
    assert all(group in r.read_bytes() for r in runs), "every job's W&B run carries the sweep's group"
    assert len({r.parent.name for r in runs}) == 4


@pytest.mark.slow
def test_eval_sweep_records_failure_goes_on_and_skips_finished(tmp_path, smoke_ckpt):
    ckpt, cache = smoke_ckpt
    common = ["-m", "seqlab", "evaluate", "-m", f"ckpt={ckpt}", "limit=6", "decoding.max_length=12", "logger=wandb",
              "engine=seqlab",
              f"hydra.sweep.dir={tmp_path / 'sweep'}", *paths(tmp_path, cache)]
    # the middle job has a bad value: the others finish, then the sweep exits 1 with a summary
    proc = run([*common, "decoding=top_p", "decoding.top_p=0.9,1.5,0.95"], expect=1)
    assert "evaluation sweep: 2 finished, 1 failed" in proc.stderr and "top_p=1.5" in proc.stderr
    found = sorted((tmp_path / "outputs" / "eval_results").glob("**/metrics.json"))
    results = [json.loads(p.read_text()) for p in found]
    statuses = sorted(r["status"] for r in results)
    assert statuses == ["failed", "ok", "ok"]
    failed = next(r for r in results if r["status"] == "failed")
    assert "top_p=1.5" in failed["error"]
    runs = list((tmp_path / "outputs" / "eval_results").glob("**/wandb/offline-run-*/run-*.wandb"))
    assert len(runs) == 3, "the failed setting has a W&B run too"
    # Re-running skips the finished settings (and retries the failed one).
    again = run([*common, "decoding=top_p", "decoding.top_p=0.9,0.95"])
    assert again.stdout.count("already evaluated") + again.stderr.count("already evaluated") == 2
    # The report lists every run, the failure included, and tests the two finished ones against each other.
    out = tmp_path / "report.html"
    run(["-m", "seqlab", "report", "--results", str(tmp_path / "outputs" / "eval_results"), "--out", str(out)])
    data = json.loads(out.with_suffix(".json").read_text())
    assert sorted(r["status"] for r in data["runs"]) == ["failed", "ok", "ok"]
    assert "top_p=1.5" in next(r["error"] for r in data["runs"] if r["status"] == "failed")
    (pairs,) = data["pairs"]
    assert pairs["mode"] == "all" and {t["metric"] for t in pairs["tests"]} == {"bleu", "chrf", "rougeL"}
    assert 'id="report-data"' in out.read_text()


@pytest.mark.slow
def test_full_decoding_sweep_gives_one_group_and_a_report(tmp_path, smoke_ckpt):
    ckpt, cache = smoke_ckpt
    run(["-m", "seqlab", "evaluate", "-m", "+sweep=decoding", f"ckpt={ckpt}", "limit=5", "decoding.max_length=10",
         "logger=wandb", "engine=seqlab", f"hydra.sweep.dir={tmp_path / 'sweep'}", *paths(tmp_path, cache)])
    runs = list((tmp_path / "outputs" / "eval_results").glob("**/wandb/offline-run-*/run-*.wandb"))
    assert len(runs) >= 10
    # every decoding joins the W&B group of the training run it evaluates (recorded in the checkpoint)
    from seqlab.checkpoint import load_for_inference, resolve

    group = load_for_inference(resolve(ckpt))[2].tracking["group"]
    assert group and all(group.encode() in r.read_bytes() for r in runs)
    out = tmp_path / "report.html"
    run(["-m", "seqlab", "report", "--results", str(tmp_path / "outputs" / "eval_results"), "--out", str(out)])
    data = json.loads(out.with_suffix(".json").read_text())
    assert len(data["runs"]) >= 10 and data["pairs"] and out.stat().st_size < 2_000_000


@pytest.mark.slow
def test_sweep_arch_trains_the_grid_and_evaluates_each(tmp_path, smoke_ckpt):
    _, cache = smoke_ckpt
    eval_args = " ".join([*paths(tmp_path, cache), "decoding.max_length=8", "logger=csv"])
    train_args = " ".join([*paths(tmp_path, cache), "trainer.max_steps=3", "logger=csv"])
    sweep = tmp_path / "sweep"
    run(["-m", "seqlab", "sweep-arch", "--experiment", "smoke", "--updates", "3", "--precision", "32", "--limit", "4",
         "--archive", str(sweep), "--train-args", train_args, "--eval-args", eval_args], timeout=900)
    assert len(list(sweep.glob("stages/train-*/checkpoints/last.ckpt"))) == 12
    decoded = [r for label in ("greedy", "beam5") for r in load_records(sweep, label).values()]
    assert len(decoded) == 24 and {r.status for r in decoded} == {"ok"} and (sweep / "report.html").is_file()
    assert len({(r.model["norm_position"], r.model["positions"], r.model["tie_embeddings"]) for r in decoded}) == 12


def test_single_eval_with_csv_logger(tmp_path, smoke_ckpt):
    ckpt, cache = smoke_ckpt
    run(["-m", "seqlab", "evaluate", f"ckpt={ckpt}", "limit=3", "decoding=beam", "decoding.max_length=8", "logger=csv",
         "engine=seqlab", f"hydra.run.dir={tmp_path / 'run'}", *paths(tmp_path, cache)])
    (result,) = [json.loads(p.read_text()) for p in (tmp_path / "outputs" / "eval_results").glob("**/metrics.json")]
    assert result["status"] == "ok" and result["metrics"]["n_examples"] == 3
    hyps = next((tmp_path / "outputs" / "eval_results").glob("**/hypotheses.jsonl")).read_text().splitlines()
    assert len(hyps) == 3 and {"id", "source", "reference", "hypothesis", "nbest"} <= set(json.loads(hyps[0]))


def test_train_multirun_goes_on_after_a_failed_job_and_exits_1(tmp_path, smoke_ckpt):
    _, cache = smoke_ckpt
    sweep = tmp_path / "sweep"
    proc = run(["-m", "seqlab", "train", "-m", "experiment=smoke", "trainer.max_steps=2", "train.quick_eval_size=0",
                "model.n_heads=3,4", f"hydra.sweep.dir={sweep}", *paths(tmp_path, cache)], expect=1)
    assert "training multirun: 1 finished, 1 failed" in proc.stderr and "model.n_heads=3" in proc.stderr
    assert (sweep / "1" / "checkpoints" / "last.ckpt").exists(), "the job after the failed one still trained"
