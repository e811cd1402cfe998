"""MBR through the evaluation and translation stages: candidates.jsonl, batch invariance, bad settings."""

from __future__ import annotations

import html
import io
import json
from pathlib import Path

import numpy as np
import pytest
from sacrebleu import sentence_chrf

from seqlab.app.evaluate import run_evaluation
from seqlab.app.translate import run_translate
from seqlab.checkpoint import load_for_inference
from seqlab.config import ConfigError
from seqlab.decoding import DecodingConfig
from seqlab.inference.evaluation import decode_texts

SMALL = ["decoding.mbr.candidates=6", "decoding.max_length=10"]
SOURCES = ["En el principio creó Dios los cielos y la tierra.", "Y la tierra estaba desordenada y vacía,",
           "y dijo Dios: Sea la luz; y fue la luz.", "Dios"]


def only_folder(cfg) -> Path:
    folders = [p.parent for p in Path(cfg.results_dir).glob("**/metrics.json")]
    assert len(folders) == 1
    return folders[0]


def test_eval_writes_candidates_that_recompute_the_choice(make_cfg, smoke_checkpoint):
    cfg = make_cfg("eval", [f"ckpt={smoke_checkpoint}", "logger=none", "decoding=mbr_chrf", *SMALL, "limit=5",
                            "n_bootstrap=0"])
    payload = run_evaluation(cfg)
    metrics = payload["metrics"]
    assert payload["label"] == "mbr_chrf_c6_sample_epsilon0.02"
    assert metrics["mbr_seconds"] > 0 and metrics["generate_seconds"] > 0
    assert metrics["decode_seconds"] == pytest.approx(metrics["mbr_seconds"] + metrics["generate_seconds"])
    folder = only_folder(cfg)
    rows = [json.loads(line) for line in (folder / "candidates.jsonl").read_text().splitlines()]
    hyps = [json.loads(line) for line in (folder / "hypotheses.jsonl").read_text().splitlines()]
    assert len(rows) == len(hyps) == 5 and all(set(r) == {"id", "candidates", "expected_utility", "chosen"}
                                               for r in rows)
    for row, hyp in zip(rows, hyps, strict=True):
        cands = row["candidates"]
        assert len(cands) == 6 and row["id"] == hyp["id"]
        eu = [np.mean([sentence_chrf(h, [r]).score for r in cands]) for h in cands]  # recomputed from the file
        np.testing.assert_allclose(row["expected_utility"], eu, atol=1e-9)
        assert row["chosen"] == int(np.argmax(eu))
        assert hyp["hypothesis"] == cands[row["chosen"]]
        assert hyp["nbest"][0]["score"] == pytest.approx(eu[row["chosen"]])  # ranked by expected utility
    assert metrics["mbr_expected_utility"] == pytest.approx(np.mean([r["expected_utility"][r["chosen"]]
                                                                     for r in rows]))


def test_separate_pseudo_references_are_kept(make_cfg, smoke_checkpoint):
    cfg = make_cfg("eval", [f"ckpt={smoke_checkpoint}", "logger=none", "decoding=mbr_bleu", *SMALL,
                            "decoding.mbr.references=4", "limit=3", "n_bootstrap=0", "score_references=false"])
    run_evaluation(cfg)
    rows = [json.loads(line) for line in (only_folder(cfg) / "candidates.jsonl").read_text().splitlines()]
    assert all(len(r["candidates"]) == 6 and len(r["pseudo_references"]) == 4 for r in rows)


def test_mbr_is_batch_invariant_and_seeded(smoke_checkpoint):
    model, tokenizer, _ = load_for_inference(smoke_checkpoint)
    cfg = DecodingConfig(method="sample", epsilon=0.02, max_length=10, mbr={"utility": "chrf", "candidates": 6})
    together = decode_texts(model, tokenizer, SOURCES, cfg, max_tokens=8000)
    alone = decode_texts(model, tokenizer, SOURCES[2:3], cfg, max_tokens=8000)
    assert together.mbr[2].candidates == alone.mbr[0].candidates
    (ids, utility, lps), (ids1, utility1, lps1) = together.hypotheses[2][0], alone.hypotheses[0][0]
    assert (ids, utility) == (ids1, utility1)
    np.testing.assert_allclose(lps, lps1, atol=1e-5)  # padding changes float rounding only
    other_seed = decode_texts(model, tokenizer, SOURCES, DecodingConfig(**{**cfg.to_dict(), "seed": 1}), 8000)
    assert [c.candidates for c in other_seed.mbr] != [c.candidates for c in together.mbr]


def test_nbest_reranking_reorders_the_beam(smoke_checkpoint):
    model, tokenizer, _ = load_for_inference(smoke_checkpoint)
    beam = DecodingConfig(method="beam", num_beams=4, n_best=4, max_length=10)
    reranked = DecodingConfig(method="beam", num_beams=4, n_best=2, max_length=10, mbr={"candidates": 4})
    plain, mbr = decode_texts(model, tokenizer, SOURCES, beam, 8000), decode_texts(model, tokenizer, SOURCES,
                                                                                      reranked, 8000)
    for hyps, choice, out in zip(plain.hypotheses, mbr.mbr, mbr.hypotheses, strict=True):
        assert choice.candidates == [tokenizer.decode_target(ids) for ids, _, _ in hyps]  # the beam's 4-best
        assert tokenizer.decode_target(out[0][0]) == choice.candidates[choice.chosen]


def test_translate_with_mbr_prints_log_probs(make_cfg, smoke_checkpoint):
    cfg = make_cfg("translate", [f"ckpt={smoke_checkpoint}", "decoding=mbr_chrf", *SMALL, "decoding.n_best=2",
                                 "format=fairseq"])
    out = io.StringIO()
    run_translate(cfg, stdin=io.StringIO(SOURCES[0] + "\n"), stdout=out)
    lines = out.getvalue().splitlines()
    h_lines = [line for line in lines if line.startswith("H-0")]
    p_lines = [line for line in lines if line.startswith("P-0")]
    assert 1 <= len(h_lines) <= 2
    for h, p in zip(h_lines, p_lines, strict=True):  # H score = the sum of the P log-probs (base 2)
        assert float(h.split("\t")[1]) == pytest.approx(sum(float(x) for x in p.split("\t")[1].split()), abs=1e-3)


@pytest.mark.parametrize(("override", "match"), [
    ("decoding.mbr.utility=rouge1", "decoding.mbr.utility=rouge1 is a summarization metric"),
    ("decoding.mbr.candidates=1", "decoding.mbr.candidates=1"),
    ("decoding.mbr.utility=meteor", "decoding.mbr.utility='meteor'"),
])
def test_bad_mbr_settings_fail_before_decoding_and_are_recorded(make_cfg, smoke_checkpoint, override, match):
    cfg = make_cfg("eval", [f"ckpt={smoke_checkpoint}", "logger=none", "decoding=mbr_chrf", *SMALL, override])
    with pytest.raises(ConfigError, match=match):
        run_evaluation(cfg)
    payload = json.loads((only_folder(cfg) / "metrics.json").read_text())
    assert payload["status"] == "failed" and "decoding.mbr" in payload["error"]
    assert not (only_folder(cfg) / "candidates.jsonl").exists()


def test_rouge_utility_on_a_summarization_corpus_is_accepted_before_loading(make_cfg, smoke_checkpoint):
    cfg = make_cfg("eval", [f"ckpt={smoke_checkpoint}", "logger=none", "decoding=mbr_rouge1", *SMALL,
                            "corpus=bible_es_en"])
    with pytest.raises(ConfigError, match="corpus bible_es_en"):
        run_evaluation(cfg)  # the corpus is named: refused before the checkpoint is read


@pytest.mark.slow  # the candidates it reads are held to the choice by the evaluation's MBR tests
def test_inspect_shows_the_candidates_and_the_choice(smoke_checkpoint, tmp_path):
    from seqlab.app import inspect as inspect_command

    out = tmp_path / "inspect.html"
    inspect_command.main(["--ckpt", str(smoke_checkpoint), "--text", SOURCES[0], "--max-length", "10",
                          "--num-beams", "0", "--mbr", "bleu", "--mbr-candidates", "6", "--out", str(out)])
    page = out.read_text()
    model, tokenizer, _ = load_for_inference(smoke_checkpoint)
    cfg = DecodingConfig(method="sample", epsilon=0.02, max_length=10, mbr={"utility": "bleu", "candidates": 6})
    choice = decode_texts(model, tokenizer, SOURCES[:1], cfg, 8000).mbr[0]
    assert "MBR: mbr_bleu_c6_sample_epsilon0.02" in page
    chosen = page[page.index("<tr class='chosen'>"):].split("</tr>")[0]
    assert html.escape(choice.candidates[choice.chosen]) in chosen


@pytest.mark.parametrize(("overrides", "label"), [
    (["decoding=top_p", "decoding.mbr={utility:bleu,candidates:16}"], "mbr_bleu_c16_sample_temperature1_top_p0.9"),
    (["decoding=beam8_lp1.0", "decoding.mbr={candidates:8}"], "mbr_chrf_c8_beam8_lp1"),
    (["decoding=mbr_chrf", "decoding.mbr.candidates=64"], "mbr_chrf_c64_sample_epsilon0.02"),
])
def test_any_setting_takes_mbr_from_the_command_line(make_cfg, overrides, label):
    from seqlab.app.evaluate import decoding_config

    assert decoding_config(make_cfg("eval", ["ckpt=x", *overrides])).label == label


def test_settings_without_mbr_keep_their_result_folder_keys(make_cfg):
    """`mbr: null` stays out of the folder key, so results written without the field are still found."""
    from seqlab.app.evaluate import setting_decoding

    assert "mbr" not in setting_decoding(make_cfg("eval", ["ckpt=x", "decoding=beam"]))
    assert setting_decoding(make_cfg("eval", ["ckpt=x", "decoding=mbr_chrf"]))["mbr"]["utility"] == "chrf"
