"""engine=seqlab_onednn in eval and translate: its own result folder and label, the same outputs."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from seqlab.app.evaluate import run_evaluation
from seqlab.app.translate import run_translate
from seqlab.config import ConfigError
from seqlab.model.onednn import onednn_available

pytestmark = pytest.mark.skipif(not onednn_available(), reason="this torch build has no oneDNN packed linear")
COMMON = ["logger=none", "decoding.max_length=10", "limit=8", "n_bootstrap=0"]


def test_eval_and_translate_with_onednn_linear_layers(make_cfg, smoke_checkpoint):
    ours = run_evaluation(make_cfg("eval", [f"ckpt={smoke_checkpoint}", "decoding=beam", *COMMON]))
    packed = run_evaluation(make_cfg("eval", [f"ckpt={smoke_checkpoint}", "decoding=beam", "engine=seqlab_onednn",
                                              *COMMON]))
    assert packed["label"] == ours["label"] + "_onednn" and packed["setting"]["engine"] == "seqlab_onednn"
    rows = {}
    for metrics in Path(make_cfg("eval", ["ckpt=x"]).results_dir).glob("**/metrics.json"):
        label = json.loads(metrics.read_text())["label"]
        rows[label] = [json.loads(r)["hypothesis"] for r in (metrics.parent / "hypotheses.jsonl").open()]
    assert rows[packed["label"]] == rows[ours["label"]]
    outs = []
    for overrides in ([], ["engine=seqlab_onednn"]):
        out = io.StringIO()
        run_translate(make_cfg("translate", [f"ckpt={smoke_checkpoint}", "decoding.max_length=10", *overrides]),
                      stdin=io.StringIO("En el principio creó Dios los cielos y la tierra.\n\nDios\n"), stdout=out)
        outs.append(out.getvalue())
    assert outs[0] == outs[1]


def test_onednn_with_another_precision_fails_before_loading(make_cfg, tmp_path):
    cfg = make_cfg("eval", [f"ckpt={tmp_path / 'missing.ckpt'}", "engine=seqlab_onednn", "precision=bf16", *COMMON])
    with pytest.raises(ConfigError, match="eval.engine=seqlab_onednn packs fp32 weights"):
        run_evaluation(cfg)
