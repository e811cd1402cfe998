"""The architecture study's archive and tables, and the report's seed aggregation, on a synthetic study folder."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from sacrebleu.metrics import BLEU

from seqlab.analysis.study import GRID, VARIANTS
from seqlab.app.study import grid_runs, main, study_runs
from seqlab.metrics import sacrebleu_scores
from seqlab.model import ModelConfig
from seqlab.model.params import analytic_counts
from seqlab.tracking.report import render
from seqlab.tracking.results import load_results

WORDS = ["in", "the", "beginning", "god", "created", "heaven", "and", "earth", "light", "was", "good", "day", "night"]


def make_study(root: Path, variants: dict[str, dict], seeds: int = 3) -> list[str]:
    rng = random.Random(0)
    refs = [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(30)]
    for variant, model_delta in variants.items():
        keep = 0.9 if variant == "tie_none" else 0.5
        for seed in range(seeds):
            name = f"{variant}-seed{seed}"
            hyps = [" ".join(w if rng.random() < keep else rng.choice(WORDS) for w in r.split()) for r in refs]
            folder = root / "results" / name / "greedy-abc"
            folder.mkdir(parents=True)
            folder.joinpath("hypotheses.jsonl").write_text("".join(
                json.dumps({"id": str(i), "source": f"s{i}", "reference": r, "hypothesis": h}) + "\n"
                for i, (r, h) in enumerate(zip(refs, hyps, strict=True))))
            model = ModelConfig(src_vocab_size=100, d_model=16, n_heads=2, d_ff=32, encoder_layers=1,
                                decoder_layers=1, **model_delta).to_dict()
            run_dir = root / "runs" / name
            folder.joinpath("metrics.json").write_text(json.dumps({
                "status": "ok", "label": "greedy", "split": "test", "decoding": {"method": "greedy"},
                "metrics": {**sacrebleu_scores(hyps, refs), "rougeL": 10.0 + seed, "hyp_logprob_per_seq": -1.0},
                "checkpoint": {"run_name": f"arch_{variant}", "seed": seed, "variant": variant, "step": 30,
                               "model": model, "path": str(run_dir / "checkpoints" / "best.ckpt")}}))
            (run_dir / "csv").mkdir(parents=True)
            rows = [f"0,{s - 1},,{6.0 - s / 10 + seed / 100 + (0.5 if variant == 'tie_none' else 0)}"
                    for s in (10, 20, 30)]
            (run_dir / "csv" / "metrics.csv").write_text("epoch,step,train/loss,val/loss\n" + "\n".join(rows) + "\n")
    return refs


def test_study_tables_from_a_study_folder_and_from_the_archive(tmp_path: Path) -> None:
    study, archive = tmp_path / "study", tmp_path / "archive"
    make_study(study, {"baseline": {"tie_embeddings": "all"}, "tie_none": {"tie_embeddings": "none"}})
    assert main(["tying", "--dir", str(study), "--archive", str(archive), "--tables-only"]) == 0
    summary = json.loads((archive / "summary.json").read_text())["tying"]
    base, none = summary["variants"]["baseline"], summary["variants"]["tie_none"]
    hyps = (archive / "baseline-seed1.hyps.txt.gz").exists()
    assert hyps and (archive / "val_loss.png").stat().st_size > 1000
    assert base["val_loss"]["values"] == {"0": pytest.approx(3.0), "1": pytest.approx(3.01), "2": pytest.approx(3.02)}
    assert none["val_loss"]["mean"] == pytest.approx(3.51)
    tied = ModelConfig(src_vocab_size=100, d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1,
                       tie_embeddings="all")
    untied = ModelConfig(**{**tied.to_dict(), "tie_embeddings": "none"})
    assert base["params"] == analytic_counts(tied).total
    (cmp,) = summary["comparisons"]
    assert cmp["delta_params"] == analytic_counts(untied).total - analytic_counts(tied).total == 2 * 100 * 16
    refs = [json.loads(line)["reference"] for line in
            (study / "results/baseline-seed0/greedy-abc/hypotheses.jsonl").read_text().splitlines()]
    bleu = {v: [BLEU().corpus_score(
        [json.loads(line)["hypothesis"] for line in
         (study / f"results/{v}-seed{s}/greedy-abc/hypotheses.jsonl").read_text().splitlines()], [refs]).score
        for s in range(3)] for v in ("baseline", "tie_none")}
    assert cmp["bleu"]["delta"] == pytest.approx(sum(bleu["tie_none"]) / 3 - sum(bleu["baseline"]) / 3)
    assert cmp["bleu"]["exceeds_spread"] and cmp["val_loss"]["delta"] == pytest.approx(0.5)
    assert set(cmp["p_test_bleu"]) == {f"tie_none-seed{s}" for s in range(3)}
    first = (archive / "summary.md").read_text()
    assert main(["tying", "--from-archive", "--archive", str(archive)]) == 0
    assert (archive / "summary.md").read_text() == first  # the archive alone regenerates the tables


def test_report_aggregates_seeds_and_draws_validation_curves(tmp_path: Path) -> None:
    make_study(tmp_path, {"baseline": {}, "tie_none": {"tie_embeddings": "none"}}, seeds=2)
    results = load_results(tmp_path / "results")
    page = render(results)
    assert "Over seeds (mean ± sd" in page
    assert "arch_baseline/greedy" in page and "arch_tie_none/greedy" in page
    assert "10.50 ± 0.71 (10.00, 11.00)" in page  # rougeL over seeds 0 and 1
    assert "Validation loss per variant" in page
    assert "Training curves: " in page and "(4 runs)" in page  # the four runs of one folder, overlaid


def test_report_shows_example_outputs_where_settings_disagree(tmp_path):
    make_study(tmp_path, {"baseline": {"tie_embeddings": "all"}, "tie_none": {"tie_embeddings": "none"}}, seeds=1)
    page = render(load_results(tmp_path / "results"))
    assert "Example outputs (2 settings; the 5 sources where they disagree most)" in page
    assert page.count("<table class='examples'>") == 1 and "arch_tie_none/greedy" in page


def test_report_marks_settings_that_differ_significantly_from_the_baseline(tmp_path):
    from seqlab.app.report import significance_marks

    make_study(tmp_path, {"baseline": {"tie_embeddings": "all"}, "tie_none": {"tie_embeddings": "none"}}, seeds=1)
    results = load_results(tmp_path / "results")
    marks = significance_marks(results)
    by_run = {r["checkpoint"]["run_name"]: marks[r["_path"]] for r in results}
    assert by_run["arch_baseline"] == "baseline" and by_run["arch_tie_none"].endswith(" *")  # 0.9 vs 0.5 kept
    page = render(results, marks=marks)
    assert by_run["arch_tie_none"] in page and "vs baseline" in page
    assert " (p 0.00" in by_run["arch_tie_none"]  # bootstrap/AR p-values shown with the delta
    from seqlab.metrics import keys as K
    from seqlab.tracking.report import markdown_table

    for r in results:
        r["metrics"][K.ci(K.BLEU)] = [r["metrics"][K.BLEU] - 1, r["metrics"][K.BLEU] + 1]
    table = markdown_table(results, marks).splitlines()
    assert "bleu [95% CI]" in table[0] and table[0].endswith("BLEU vs greedy |")
    row = next(line for line in table if by_run["arch_tie_none"] in line)
    bleu = row.split(" | ")[1]
    assert bleu.count("[") == 1 and bleu.count(",") == 1  # "0.90 [lo, hi]"


def test_runs_come_from_the_one_variant_table(tmp_path):
    runs = study_runs(["tying", "positions"], 2, tmp_path)
    assert [r.name for r in runs] == [f"{v}-seed{s}" for s in (0, 1)
                                      for v in ("baseline", "tie_decoder", "tie_none", "learned_positions")]
    tie_none = runs[2]
    assert tie_none.train[-1:] == VARIANTS["tie_none"] and "seed=0" in tie_none.train
    assert f"hydra.run.dir={tmp_path / 'runs' / 'tie_none-seed0'}" in tie_none.train
    results = f"results_dir={tmp_path / 'results'}"
    assert tie_none.evaluations == (("decoding=greedy", "split=test", "logger=csv", results),)


def test_the_grid_is_every_combination_each_decoded_twice(tmp_path):
    runs = grid_runs(1, tmp_path, "smoke", "null", 4, "g")
    assert len(runs) == 12 and len({r.name for r in runs}) == 12
    assert all(len(r.evaluations) == 2 and r.evaluations[1][0] == "decoding=beam" for r in runs)
    assert {o for r in runs for o in r.train if o.startswith("model.tie_embeddings=")} == {
        f"model.tie_embeddings={v}" for v in GRID["model.tie_embeddings"]}
