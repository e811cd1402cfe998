"""The report's decoding sections: the beam-search curse plot and MBR's candidates with the choice marked."""

from __future__ import annotations

import re
from pathlib import Path

from seqlab.decoding import DecodingConfig
from seqlab.decoding.mbr import choose
from seqlab.metrics import keys as K
from seqlab.tracking.decoding_sections import curse_groups
from seqlab.tracking.report import render
from seqlab.tracking.results import OK, ResultDir, load_results


def write_result(root: Path, decoding: DecodingConfig, metrics: dict, hyps: list[dict] | None = None,
                 candidates: list[dict] | None = None) -> None:
    out = ResultDir.for_setting(root, "/runs/m/checkpoints/last.ckpt", decoding.label, decoding.to_dict())
    out.write_metrics({"status": OK, "label": decoding.label, "decoding": decoding.to_dict(), "split": "test",
                       "test_set": {"corpus": "bible", "split": "test"}, "metrics": metrics,
                       "checkpoint": {"path": "/runs/m/checkpoints/last.ckpt", "run_name": "m"}})
    if hyps is not None:
        out.write_hypotheses(hyps)
    if candidates is not None:
        out.write_candidates(candidates)


def test_beam_curse_plot_and_mbr_examples(tmp_path):
    for lp in (0.0, 1.0):
        for k in (1, 2, 4, 8):
            write_result(tmp_path, DecodingConfig(method="beam", num_beams=k, length_penalty=lp),
                         {K.BLEU: 20 - k * (1 - lp), K.HYP_SEQ_LOGPROB: -30 + k, K.LENGTH_RATIO: 1 - 0.05 * k,
                          K.SHORT_SHARE: k * 0.5})
    cands = ["in the beginning", "in the beginning", "at first", "in the start"]
    choice = choose("chrf", cands)
    mbr = DecodingConfig(method="sample", epsilon=0.02, mbr={"utility": "chrf", "candidates": 4})
    write_result(tmp_path, mbr, {K.BLEU: 21.0},
                 hyps=[{"id": "Gen 1:1", "source": "En el principio", "reference": "In the beginning",
                        "hypothesis": cands[choice.chosen]}],
                 candidates=[{"id": "Gen 1:1", **choice.to_dict()}])
    results = load_results(tmp_path)
    groups = curse_groups(results)
    assert sorted(lp for _, lp in groups) == [0.0, 1.0] and all(len(v) == 4 for v in groups.values())
    page = render(results)
    curse = page[page.index("The beam-search curse"):]
    assert curse.count("<img") >= 1
    section = page[page.index("MBR choices"):]
    chosen_rows = re.findall(r"<tr class='chosen'><td>([\d.]+)</td><td>(\d+)</td><td>([^<]*)</td>", section)
    assert chosen_rows == [(f"{choice.expected_utility[choice.chosen]:.2f}", str(cands.count(cands[choice.chosen])),
                            cands[choice.chosen])]
    assert "3 distinct of 4" in section and "En el principio" in section


def test_a_40_run_sweep_page_stays_under_2_mb(tmp_path):
    """40 settings of one long training: its curves go into the page once, thinned; the page and its data
    stay small."""
    from seqlab.tracking.report import write_report

    run = tmp_path / "runs" / "m"
    (run / "csv").mkdir(parents=True)
    (run / "csv" / "metrics.csv").write_text("epoch,step,train/loss,train/lr,val/loss\n" + "".join(
        f"0,{s},{5 - s / 3000},0.001,{4 - s / 3000}\n" for s in range(0, 6300, 5)))
    results = []
    for k in range(40):
        decoding = DecodingConfig(method="sample", temperature=0.5 + k / 40, seed=1)
        results.append({"status": OK, "label": decoding.label, "decoding": decoding.to_dict(), "split": "test",
                        "metrics": {K.BLEU: 20.0 + k / 10, K.ci(K.BLEU): [19.0, 21.0 + k / 10], K.CHRF: 50.0},
                        "checkpoint": {"path": str(run / "checkpoints" / "last.ckpt"), "run_name": "m"}})
    page = write_report(results, tmp_path / "report.html")
    data = __import__("json").loads(page.with_suffix(".json").read_text())
    with_curves = [r for r in data["runs"] if r["curves"]]
    assert len(with_curves) == 1 and len(with_curves[0]["curves"]["val/loss"]) <= 200
    assert page.stat().st_size < 2_000_000 and page.with_suffix(".json").stat().st_size < 2_000_000
