"""engine=ctranslate2 in eval and translate: same test set, same metrics, greedy outputs equal to seqlab's."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from seqlab.app.evaluate import run_evaluation
from seqlab.app.translate import run_translate
from seqlab.config import ConfigError

pytest.importorskip("ctranslate2")
COMMON = ["logger=none", "decoding.max_length=10", "limit=8", "n_bootstrap=0"]


def hypotheses(payload_cfg) -> dict[str, list[str]]:
    out = {}
    for metrics in Path(payload_cfg.results_dir).glob("**/metrics.json"):
        label = json.loads(metrics.read_text())["label"]
        rows = (metrics.parent / "hypotheses.jsonl").read_text().splitlines()
        out[label] = [json.loads(r)["hypothesis"] for r in rows]
    return out


@pytest.mark.parametrize("decoding", ["greedy", "beam"])
def test_eval_with_ctranslate2_beside_seqlab(make_cfg, smoke_checkpoint, decoding):
    # CTranslate2's beam search bans pad and the decoder start before its softmax: seqlab's renormalized search
    same_search = ["decoding.renormalize_logits=true"] if decoding == "beam" else []
    cfg = make_cfg("eval", [f"ckpt={smoke_checkpoint}", f"decoding={decoding}", *same_search, *COMMON])
    ours = run_evaluation(cfg)
    theirs = run_evaluation(make_cfg("eval", [f"ckpt={smoke_checkpoint}", f"decoding={decoding}", "engine=ctranslate2",
                                              *same_search, *COMMON]))
    assert theirs["label"] == ours["label"] + "_ct2" and theirs["engine"] == "ctranslate2"
    found = hypotheses(cfg)
    assert set(found) == {ours["label"], theirs["label"]}, "each engine gets its own result folder"
    assert found[ours["label"]] == found[theirs["label"]]
    for key in ("bleu", "chrf", "hyp_logprob_per_seq", "ref_logprob_per_token"):
        assert key in theirs["metrics"]


def test_seqlab_int8_decodes_with_int8_linear_layers_and_scores_references_in_fp32(make_cfg, smoke_checkpoint):
    from seqlab.checkpoint import load_for_inference
    from seqlab.engines.choice import make_engine
    from seqlab.model.quantize import Int8Linear

    model, tokenizer, _ = load_for_inference(smoke_checkpoint)
    engine = make_engine("seqlab", smoke_checkpoint, model, tokenizer, Path("unused"), "int8")
    assert isinstance(engine.model.output, Int8Linear) and not isinstance(model.output, Int8Linear)
    fp32 = run_evaluation(make_cfg("eval", [f"ckpt={smoke_checkpoint}", *COMMON]))
    int8 = run_evaluation(make_cfg("eval", [f"ckpt={smoke_checkpoint}", "precision=int8", *COMMON]))
    assert int8["label"] == fp32["label"] + "_int8"
    assert int8["metrics"]["ref_logprob_per_token"] == fp32["metrics"]["ref_logprob_per_token"]  # fp32 scoring


def test_translate_with_ctranslate2_int8(make_cfg, smoke_checkpoint):
    lines = ["En el principio creó Dios los cielos y la tierra.", "", "Dios"]
    outs = {}
    for overrides in ([], ["engine=ctranslate2"], ["engine=ctranslate2", "precision=int8"]):
        cfg = make_cfg("translate", [f"ckpt={smoke_checkpoint}", "decoding.max_length=10", *overrides])
        out = io.StringIO()
        run_translate(cfg, stdin=io.StringIO("".join(line + "\n" for line in lines)), stdout=out)
        outs[" ".join(overrides)] = out.getvalue().split("\n")[:-1]
    assert outs[""] == outs["engine=ctranslate2"]
    assert len(outs["engine=ctranslate2 precision=int8"]) == 3 and outs["engine=ctranslate2 precision=int8"][1] == ""


@pytest.mark.parametrize(("overrides", "match"), [
    (["engine=ctranslate2", "decoding=beam"], "decoding.renormalize_logits=true"),
    (["engine=ctranslate2", "decoding=beam", "decoding.renormalize_logits=true", "decoding.early_stopping=never"],
     "decoding.early_stopping=never"),
    (["engine=ctranslate2", "decoding=sample"], "decoding.method=sample: CTranslate2's sampling is not seeded"),
    (["engine=ctranslate2", "decoding=diverse8_g4"], "decoding.num_beam_groups"),
    (["engine=ctranslate2", "decoding.repetition_penalty=1.2"], "decoding.repetition_penalty=1.2"),
    (["precision=fp16"], "eval.precision='fp16'"),
    (["engine=onnx"], "eval.engine='onnx'"),
])
def test_bad_engine_settings_fail_before_loading(make_cfg, tmp_path, overrides, match):
    cfg = make_cfg("eval", [f"ckpt={tmp_path / 'missing.ckpt'}", *COMMON, *overrides])
    with pytest.raises(ConfigError, match=match):  # the checkpoint does not exist: nothing was loaded
        run_evaluation(cfg)
