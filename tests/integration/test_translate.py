"""Translate: one output line per input line, in order; the evaluation's hypotheses; fairseq's n-best format."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seqlab.app.translate import run_translate
from seqlab.checkpoint import load_for_inference
from seqlab.data import Example
from seqlab.decoding import DecodingConfig
from seqlab.inference.evaluation import EvalSettings, evaluate
from seqlab.inference.text import translate

ROOT = Path(__file__).resolve().parents[2]
LINES = ["En el principio creó Dios los cielos y la tierra.", "", "Y la tierra estaba desordenada y vacía,",
         "   ", " ".join(["y dijo Dios: Sea la luz; y fue la luz."] * 60), "Dios"]


def run(make_cfg, ckpt: Path, lines: list[str], *overrides: str) -> list[str]:
    cfg = make_cfg("translate", [f"ckpt={ckpt}", "decoding.max_length=12", *overrides])
    out = io.StringIO()
    run_translate(cfg, stdin=io.StringIO("".join(line + "\n" for line in lines)), stdout=out)
    return out.getvalue().split("\n")[:-1]


@pytest.mark.parametrize("chunk", [1, 2, 2000])
def test_one_line_out_per_line_in_and_blank_lines_stay_blank(make_cfg, smoke_checkpoint, chunk):
    out = run(make_cfg, smoke_checkpoint, LINES, f"chunk_size={chunk}", "max_tokens=64")
    assert len(out) == len(LINES)
    assert [o == "" for o in out] == [not line.strip() for line in LINES]  # models this small still emit tokens


def test_translations_equal_the_evaluations_hypotheses(make_cfg, smoke_checkpoint):
    model, tokenizer, _ = load_for_inference(smoke_checkpoint)
    decoding = DecodingConfig(method="beam", num_beams=3, max_length=12)
    sources = [line for line in LINES if line.strip()]
    records, _ = evaluate(model, tokenizer, [Example(str(i), s, "ref") for i, s in enumerate(sources)], decoding,
                          EvalSettings(score_references=False, n_bootstrap=0))
    ours = translate(model, tokenizer, sources, decoding, max_tokens=50)  # other batches, same outputs
    assert [h[0].text for h in ours] == [r.hypothesis for r in records]
    cli = run(make_cfg, smoke_checkpoint, sources, "decoding=beam", "decoding.num_beams=3")
    assert cli == [r.hypothesis for r in records]


def test_fairseq_nbest_format(make_cfg, smoke_checkpoint):
    out = run(make_cfg, smoke_checkpoint, LINES[:3], "decoding=beam", "decoding.num_beams=3", "decoding.n_best=2",
              "format=fairseq")
    assert [line.split("\t")[0] for line in out] == ["S-0", "H-0", "P-0", "H-0", "P-0", "S-1",
                                                    "S-2", "H-2", "P-2", "H-2", "P-2"]
    h, p = out[1].split("\t"), out[2].split("\t")
    assert float(h[1]) <= 0 and len(p[1].split()) >= 1 and out[0] == f"S-0\t{LINES[0]}"
    with pytest.raises(Exception, match="format=fairseq"):
        run(make_cfg, smoke_checkpoint, LINES[:1], "decoding=beam", "decoding.n_best=2")


def test_command_line_keeps_stdout_clean(smoke_checkpoint, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("Dios\n\nla luz\n")
    proc = subprocess.run([sys.executable, "-m", "seqlab", "translate", f"ckpt={smoke_checkpoint}",
                           "decoding.max_length=8"], cwd=ROOT, stdin=src.open(), capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(proc.stdout.split("\n")) == 4 and proc.stdout.split("\n")[1] == "" and proc.stdout.endswith("\n")
    assert "translated 3 lines" in proc.stderr
    assert not list(ROOT.glob(".hydra")), "nothing written next to the output"


def test_bf16_decoding_is_the_model_under_bf16_autocast(make_cfg, smoke_checkpoint, tmp_path, monkeypatch):
    """precision=bf16 (eval and translate): the hypotheses of generate under bf16 autocast, a result folder and
    label of their own beside fp32's, references still scored in fp32; a bad value names the key."""
    import torch

    import seqlab.decoding.engine as engine_module
    from seqlab.app.evaluate import run_evaluation
    from seqlab.config import ConfigError
    from seqlab.decoding import generate
    from seqlab.inference.evaluation import pad_batch

    model, tokenizer, _ = load_for_inference(smoke_checkpoint)
    sources = [line for line in LINES if line.strip() and len(line) < 100]  # 3 short ones
    cfg = DecodingConfig(max_length=12)
    ids, pad = pad_batch([tokenizer.encode_source([s])[0] for s in sources], model.cfg.pad_id, torch.device("cpu"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = generate(model, ids, pad, cfg)
    expected = [tokenizer.decode_target(out.sequences[i, 0, : out.lengths[i, 0]].tolist()) for i in range(3)]
    autocast = []

    def recording(*args, **kwargs):
        autocast.append(torch.is_autocast_enabled("cpu"))
        return generate(*args, **kwargs)

    monkeypatch.setattr(engine_module, "generate", recording)
    assert run(make_cfg, smoke_checkpoint, sources, "precision=bf16") == expected
    assert autocast and all(autocast)  # every batch decoded under bf16 autocast (not only the same outputs)

    common = [f"ckpt={smoke_checkpoint}", "logger=none", "decoding.max_length=12", "n_bootstrap=0", "limit=3"]
    fp32 = run_evaluation(make_cfg("eval", common))
    bf16 = run_evaluation(make_cfg("eval", [*common, "precision=bf16"]))
    assert (fp32["label"], bf16["label"]) == ("greedy", "greedy_bf16")
    assert bf16["settings"]["precision"] == "bf16" and "precision" not in fp32["setting"]
    assert bf16["metrics"]["ref_logprob_per_token"] == pytest.approx(fp32["metrics"]["ref_logprob_per_token"])
    assert bf16["metrics"]["hyp_logprob_per_token"] != fp32["metrics"]["hyp_logprob_per_token"]  # bf16 did run
    with pytest.raises(ConfigError, match="precision"):
        run(make_cfg, smoke_checkpoint, sources, "precision=fp16")
    if not torch.cuda.is_available():  # a device torch does not have fails naming the key, before loading
        with pytest.raises(ConfigError, match="device='cuda' but torch .* sees no CUDA device"):
            run(make_cfg, smoke_checkpoint, sources, "device=cuda")


def test_target_prefixes_from_a_column_or_one_text(make_cfg, smoke_checkpoint):
    """SOURCE<TAB>PREFIX lines (an empty prefix forces nothing), or one prefix for every line: each output
    starts with its prefix's pieces; a line without its TAB fails naming the line."""
    lines = ["En el principio creó Dios los cielos y la tierra.\tIn the", "Dios\t", "Y la tierra\tAnd"]
    out = run(make_cfg, smoke_checkpoint, lines, "prefix_column=true", "decoding=beam", "decoding.num_beams=3",
              "format=fairseq")
    hyps = [line.split("\t")[2] for line in out if line.startswith("H-")]
    assert hyps[0].startswith("In the") and hyps[2].startswith("And")
    plain = run(make_cfg, smoke_checkpoint, ["Dios"], "decoding=beam", "decoding.num_beams=3")
    assert hyps[1] == plain[0]  # an empty prefix: as without one
    same = run(make_cfg, smoke_checkpoint, ["Dios", "Y la tierra"], "target_prefix='In the'")
    assert all(o.startswith("In the") for o in same)
    with pytest.raises(ValueError, match="input line 2 has no TAB"):
        run(make_cfg, smoke_checkpoint, ["a\tb", "no tab here"], "prefix_column=true")
    with pytest.raises(Exception, match="two sources of prefixes"):
        run(make_cfg, smoke_checkpoint, ["a\tb"], "prefix_column=true", "target_prefix=x")


def test_prefix_size_forces_each_references_first_tokens(smoke_checkpoint):
    """fairseq's --prefix-size: the evaluation forces the first N target tokens of each reference."""
    model, tokenizer, _ = load_for_inference(smoke_checkpoint)
    refs = ["In the beginning God created the heaven", "And the earth", "God"]
    examples = [Example(str(i), s, r) for i, (s, r) in enumerate(zip(LINES[::2], refs, strict=False))]
    decoding = DecodingConfig(method="beam", num_beams=3, max_length=12, prefix_size=2)
    records, _ = evaluate(model, tokenizer, examples, decoding, EvalSettings(score_references=False, n_bootstrap=0))
    for record, ref in zip(records, refs, strict=True):
        first = [t for t in tokenizer.encode_target([ref])[0] if t != tokenizer.eos_id][:2]
        assert record.token_logprobs and tokenizer.encode_target([record.hypothesis])[0][: len(first)] == first
    assert decoding.label == "beam3_lp1_prefix2"


def test_lexical_constraints_from_columns_and_from_reference_words(make_cfg, smoke_checkpoint):
    """fairseq-interactive's SOURCE<TAB>CONSTRAINT... lines: the output contains each constraint; an evaluation
    with constraint_words draws words of each reference, records them, and reports how many were met."""
    lines = ["En el principio creó Dios los cielos y la tierra.\tearth\theaven", "Dios", "Y la tierra\tGod"]
    out = run(make_cfg, smoke_checkpoint, lines, "decoding=beam", "decoding.num_beams=4", "decoding.max_length=20",
              "decoding.constraints=unordered")
    assert "earth" in out[0] and "heaven" in out[0] and "God" in out[2]
    assert out[1] == run(make_cfg, smoke_checkpoint, ["Dios"], "decoding=beam", "decoding.num_beams=4",
                         "decoding.max_length=20", "decoding.force_eos=fairseq")[0]  # no constraints: plain search
    with pytest.raises(Exception, match="target prefix does not combine"):
        run(make_cfg, smoke_checkpoint, lines[:1], "decoding=beam", "decoding.constraints=ordered",
            "target_prefix=x")
    model, tokenizer, _ = load_for_inference(smoke_checkpoint)
    refs = ["In the beginning God created the heaven and the earth.", "God", "And the earth was without form"]
    examples = [Example(str(i), s.split("\t")[0], r) for i, (s, r) in enumerate(zip(lines, refs, strict=True))]
    decoding = DecodingConfig(method="beam", num_beams=4, max_length=20, constraints="ordered", constraint_words=2)
    records, metrics = evaluate(model, tokenizer, examples, decoding, EvalSettings(score_references=False,
                                                                                  n_bootstrap=0))
    assert [len(r.constraints) for r in records] == [2, 1, 2]
    for r, ref in zip(records, refs, strict=True):
        assert all(w in ref for w in r.constraints)
        assert all(w in r.hypothesis for w in r.constraints)
        assert " ".join(r.constraints) in " ".join(w for w in ref.replace(".", "").split() if w in r.constraints)
    assert metrics["constraints_met"] == 100.0 and metrics["constrained_all_met"] == 100.0
    assert decoding.label == "beam4_lp1_ordered2"


@pytest.mark.parametrize(("line", "match"), [
    ("Dios\t", r"input line 3: constraint 1 is blank"),  # a TAB with nothing after it
    ("Dios\tGod\t   ", r"input line 3: constraint 2 is blank"),
    ("Dios\t\u200b", r"constraint 0 of input line 3 is empty \(it tokenized to nothing\)"),  # zero-width
    ("Dios\t" + " ".join(["heaven and earth"] * 12), r"the constraints of input line 3 have \d+ tokens"),
])
def test_a_constraint_that_cannot_be_met_is_refused_naming_its_line(make_cfg, smoke_checkpoint, line, match):
    """Never dropped: a blank, empty or over-long constraint fails before decoding, naming its input line."""
    lines = ["En el principio creó Dios los cielos y la tierra.\tearth", "", line]
    with pytest.raises(Exception, match=match):
        run(make_cfg, smoke_checkpoint, lines, "decoding=beam", "decoding.num_beams=4", "decoding.max_length=20",
            "decoding.constraints=unordered")
