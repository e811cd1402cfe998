"""Every command ends bad input alike (seqlab.app.cli): exit status 2 and a message `seqlab <command>: ...`
naming what to change, no traceback; the argparse commands return an int."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from seqlab.app import average, compare, export, import_hf, inspect, params, report
from seqlab.app.main import COMMANDS

APP = Path(__file__).resolve().parents[2] / "src" / "seqlab" / "app"


def test_every_argparse_command_runs_through_the_one_helper():
    for name, command in COMMANDS.items():
        if command.hydra:
            continue
        tree = ast.parse((APP / f"{command.module}.py").read_text())
        calls = {f"{n.func.value.id}.{n.func.attr}" for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)}
        assert {"cli.parser", "cli.run"} <= calls, name


@pytest.mark.parametrize(("main", "argv", "message"), [
    (params.main, ["--d_model", "100", "--n_heads", "8"], "seqlab params: model.d_model=100 is not divisible"),
    (compare.main, [], "seqlab compare: nothing to compare"),
    (average.main, ["missing.ckpt", "--out", "x.ckpt"], "seqlab average: averaging needs at least two checkpoints"),
    (average.main, ["a.ckpt", "b.ckpt", "--out", "x.ckpt"], "seqlab average: a.ckpt: checkpoint not found"),
    (inspect.main, ["--ckpt", "missing.ckpt", "--text", "hola"], "seqlab inspect: missing.ckpt: checkpoint not found"),
    (export.main, ["--ckpt", "missing.ckpt", "--out", "x"], "seqlab export: missing.ckpt: checkpoint not found"),
    (export.main, ["--ckpt", "x.ckpt", "--out", "x", "--quantization", "int8"],
     "seqlab export: --quantization applies to --format ctranslate2 only"),
    (import_hf.main, ["--hf", ".", "--out", "x.ckpt"],
     "seqlab import: config.json: missing; a Hugging Face model folder"),
    (report.main, ["--results", "nowhere"], "seqlab report: nowhere: no metrics.json found"),
])
def test_bad_input_exits_2_naming_it(main, argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.ckpt").exists() and not (tmp_path / "x").exists()  # nothing half-written


@pytest.mark.parametrize(("command", "overrides", "message"), [
    ("train", ["model.positions=rope", "model.rope_dim=7", "logger=none"],
     "seqlab train: model.rope_dim=7 must be even"),
    ("evaluate", ["ckpt=missing.ckpt", "engine=seqlab", "logger=none"],
     "seqlab evaluate: missing.ckpt: checkpoint not found"),
    # the same cli.reraise path as evaluate's: with the slow tests
    pytest.param("translate", ["ckpt=missing.ckpt", "engine=seqlab"],
                 "seqlab translate: missing.ckpt: checkpoint not found", marks=pytest.mark.slow),
    pytest.param("bench", ["ckpt=missing.ckpt"], "seqlab bench: missing.ckpt: checkpoint not found",
                 marks=pytest.mark.slow),
    pytest.param("distill", ["ckpt=missing.ckpt", "out=x", "engine=seqlab"],
                 "seqlab distill: missing.ckpt: checkpoint not found", marks=pytest.mark.slow),
])
def test_a_hydra_commands_bad_input_exits_2_naming_it_without_a_traceback(command, overrides, message, tmp_path):
    places = [f"paths.log_dir={tmp_path}", f"paths.cache_dir={tmp_path}"]
    done = subprocess.run([sys.executable, "-m", "seqlab.app.main", command, *overrides, *places], cwd=tmp_path,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
