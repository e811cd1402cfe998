"""Every argparse command is built alike (seqlab.app.cli): bad input exits with status 2 and a message
`seqlab <command>: ...` naming what to change; the commands return an int."""

from __future__ import annotations

import ast
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
    (import_hf.main, ["--hf", ".", "--out", "x.ckpt"], "seqlab import: . has no config.json"),
    (report.main, ["--results", "nowhere"], "seqlab report: nowhere: no metrics.json found"),
])
def test_bad_input_exits_2_naming_it(main, argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.ckpt").exists() and not (tmp_path / "x").exists()  # nothing half-written
