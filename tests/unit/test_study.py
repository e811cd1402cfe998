"""The architecture study's archive and tables, and the report's seed aggregation, on a synthetic study folder."""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from sacrebleu.metrics import BLEU

from seqlab.analysis.study import GRID, RECIPES, VARIANTS, Archived, Record, curve_budget, load_records
from seqlab.analysis.study_questions import QUESTIONS, STUDY
from seqlab.analysis.study_runs import execute, grid_runs, study_runs, training_wall
from seqlab.analysis.study_tables import common_steps, depth_fails, draw_curves, machines_table
from seqlab.metrics import by_source_length, sacrebleu_scores
from seqlab.model import ModelConfig
from seqlab.model.params import analytic_counts
from seqlab.tracking.report import render
from seqlab.tracking.results import load_results

WORDS = ["in", "the", "beginning", "god", "created", "heaven", "and", "earth", "light", "was", "good", "day", "night"]


def make_refs() -> list[str]:
    rng = random.Random(0)
    return [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(30)]


# each fake test source's subword tokens: 3 sentences <= 16, 6 in 17-32, 10 in 33-64, 11 above
SOURCE_LENGTHS = [8 + 3 * i for i in range(30)]


def write_evaluation(results: Path, run_dir: Path, variant: str, seed: int, refs: list[str], model_delta: dict,
                     label: str = "greedy") -> None:
    """One decoded run as `seqlab evaluate` leaves it: metrics.json and hypotheses.jsonl under results/<run>/."""
    rng = random.Random(f"{variant}-{seed}-{label}")  # not hash(): str hashes change from process to process
    # tie_none is better everywhere; rope_positions on the longest sources only
    keep = [0.9 if variant == "tie_none" or (variant == "rope_positions" and n > 64) else 0.5 for n in SOURCE_LENGTHS]
    hyps = [" ".join(w if rng.random() < k else rng.choice(WORDS) for w in r.split())
            for r, k in zip(refs, keep, strict=True)]
    folder = results / run_dir.name / f"{label}-abc"
    folder.mkdir(parents=True)
    folder.joinpath("hypotheses.jsonl").write_text("".join(
        json.dumps({"id": str(i), "source": f"s{i}", "reference": r, "hypothesis": h,
                    "source_tokens": SOURCE_LENGTHS[i]}) + "\n"
        for i, (r, h) in enumerate(zip(refs, hyps, strict=True))))
    model = ModelConfig(src_vocab_size=100, d_model=16, n_heads=2, d_ff=32, encoder_layers=1,
                        decoder_layers=1, **model_delta).to_dict()
    folder.joinpath("metrics.json").write_text(json.dumps({
        "status": "ok", "label": label, "split": "test", "decoding": {"method": label}, "engine": "seqlab",
        "settings": {"precision": "fp32"},
        "metrics": {**sacrebleu_scores(hyps, refs), **by_source_length(hyps, refs, SOURCE_LENGTHS),
                    "rougeL": 10.0 + seed, "hyp_logprob_per_seq": -1.0},
        "checkpoint": {"run_name": f"arch_{variant}", "seed": seed, "variant": variant, "step": 30,
                       "git_revision": "0123abc", "model": model,
                       "path": str(run_dir / "checkpoints" / "best.ckpt")}}))


def write_training(run_dir: Path, variant: str, seed: int) -> None:
    """A finished training's run folder: the CSV history, the resolved config and the progress log."""
    (run_dir / "csv").mkdir(parents=True, exist_ok=True)
    rows = [f"0,{s - 1},,{6.0 - s / 10 + seed / 100 + (0.5 if variant == 'tie_none' else 0)}" for s in (10, 20, 30)]
    (run_dir / "csv" / "metrics.csv").write_text("epoch,step,train/loss,val/loss\n" + "\n".join(rows) + "\n")
    (run_dir / "csv" / "hparams.yaml").write_text("trainer:\n  precision: bf16-mixed\n")
    (run_dir / "train.log").write_text("".join(
        f"[2026-01-01 00:00:{s:02d},000][seqlab.train.fit][INFO] - step {s}  loss 5.0  lr 1e-3  900 tok/s  {s}s  "
        f"ETA 0:00:10\n" for s in (10, 20, 30)))


def make_study(root: Path, variants: dict[str, dict], seeds: int = 3) -> list[str]:
    """A study folder as the short recipe leaves it, for the report (results/<run>/<setting>/, runs/<run>/)."""
    refs = make_refs()
    for variant, model_delta in variants.items():
        for seed in range(seeds):
            run_dir = root / "runs" / f"{variant}-seed{seed}"
            write_evaluation(root / "results", run_dir, variant, seed, refs, model_delta)
            write_training(run_dir, variant, seed)
    return refs


class FakeSeqlab:
    """`seqlab train` / `seqlab evaluate` as the runner calls them, without training: each leaves the files the
    real command leaves; `stop_at` raises KeyboardInterrupt at that run's training (a session's end)."""

    def __init__(self, stop_at: str | None = None) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.stop_at, self.refs = stop_at, make_refs()

    def __call__(self, command: str, *args: str) -> bool:
        self.calls.append((command, *args))
        values = dict(a.split("=", 1) for a in args if "=" in a)
        if command == "train":
            run_dir = Path(values["hydra.run.dir"])
            if run_dir.name == self.stop_at:
                raise KeyboardInterrupt
            write_training(run_dir, run_dir.name.rsplit("-seed", 1)[0], int(values["seed"]))
            (run_dir / "checkpoints").mkdir(exist_ok=True)
            (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"weights")
            return True
        assert values["ckpt"].endswith("checkpoints/last.ckpt")  # decoded after exactly the recipe's updates
        run_dir = Path(values["ckpt"]).parent.parent
        variant, seed = run_dir.name.rsplit("-seed", 1)
        delta = {"tie_embeddings": "none"} if variant == "tie_none" else {}
        write_evaluation(Path(values["results_dir"]), run_dir, variant, int(seed), self.refs, delta,
                         label=values["decoding"])
        return True

    def trained(self) -> list[str]:
        return [Path(dict(a.split("=", 1) for a in c[1:] if "=" in a)["hydra.run.dir"]).name
                for c in self.calls if c[0] == "train"]


def table(archive: Path, question: str, label: str) -> tuple[str, dict]:
    """A question's table and numbers from the archive, by its own table function."""
    return QUESTIONS[question].numbers(Archived.load(archive, label))


def test_study_tables_from_the_runs_and_from_the_archive_alone(tmp_path: Path) -> None:
    archive, fake = tmp_path / "archive", FakeSeqlab()
    runs = study_runs(["tying"], 3, RECIPES["short"], tmp_path / "study")
    runs = [r for r in runs if r.variant in ("baseline", "tie_none")]
    assert execute(runs, archive, command=fake) == []
    text, summary = table(archive, "tying", "greedy")
    base, none = summary["variants"]["baseline"], summary["variants"]["tie_none"]
    (png,) = draw_curves(archive, {"tying": QUESTIONS["tying"]}, "greedy", load_records(archive, "training"))
    assert (archive / "baseline-seed1.greedy.hyps.txt.gz").exists() and png == archive / "val_loss.png"
    assert png.stat().st_size > 1000
    assert base["val_loss"]["values"] == {"0": pytest.approx(3.0), "1": pytest.approx(3.01), "2": pytest.approx(3.02)}
    assert none["val_loss"]["mean"] == pytest.approx(3.51)
    tied = ModelConfig(src_vocab_size=100, d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1,
                       tie_embeddings="all")
    untied = ModelConfig(**{**tied.to_dict(), "tie_embeddings": "none"})
    assert base["params"] == analytic_counts(tied).total
    (cmp,) = summary["comparisons"]
    assert cmp["delta_params"] == analytic_counts(untied).total - analytic_counts(tied).total == 2 * 100 * 16
    results = tmp_path / "study" / "results" / "greedy"
    refs = [json.loads(line)["reference"] for line in
            (results / "baseline-seed0/greedy-abc/hypotheses.jsonl").read_text().splitlines()]
    bleu = {v: [BLEU().corpus_score(
        [json.loads(line)["hypothesis"] for line in
         (results / f"{v}-seed{s}/greedy-abc/hypotheses.jsonl").read_text().splitlines()], [refs]).score
        for s in range(3)] for v in ("baseline", "tie_none")}
    assert cmp["bleu"]["delta"] == pytest.approx(sum(bleu["tie_none"]) / 3 - sum(bleu["baseline"]) / 3)
    assert cmp["bleu"]["exceeds_spread"] and cmp["val_loss"]["delta"] == pytest.approx(0.5)
    assert set(cmp["p_test_bleu"]) == {f"tie_none-seed{s}" for s in range(3)}
    alone = tmp_path / "copied"  # the records alone, on a machine without the runs' folders
    shutil.copytree(archive, alone, ignore=shutil.ignore_patterns("*.png"))
    shutil.rmtree(tmp_path / "study")
    assert table(alone, "tying", "greedy")[0] == text  # the archive alone regenerates the tables


def test_each_record_names_its_provenance(tmp_path: Path) -> None:
    archive, fake = tmp_path / "archive", FakeSeqlab()
    runs = [r for r in study_runs(["positions"], 1, RECIPES["trained"], tmp_path / "study") if r.variant == "baseline"]
    assert execute(runs, archive, command=fake) == []
    beam, greedy = (json.loads((archive / f"baseline-seed0.{label}.json").read_text()) for label in ("beam5", "greedy"))
    assert beam["label"] == "beam5" and greedy["label"] == "greedy"  # one record per decoding, neither overwritten
    assert beam["metrics"] != greedy["metrics"]
    train, decode = beam["training"], beam["evaluation"]
    assert train["commit"] == "0123abc" and train["precision"] == "bf16-mixed" and train["wall_s"] == 30.0
    assert train["updates"] == 30 and train["command"].startswith("seqlab train experiment=arch_study_trained")
    assert decode["precision"] == "fp32" and decode["engine"] == "seqlab" and "decoding=beam" in decode["command"]
    assert decode["cpu"] and decode["torch"] and decode["date"].endswith("Z")


def test_a_stopped_study_resumes_from_the_archive_without_retraining(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    runs = [r for r in study_runs(["tying"], 2, RECIPES["short"], tmp_path / "study") if r.variant != "tie_decoder"]
    first = FakeSeqlab(stop_at="tie_none-seed0")
    with pytest.raises(KeyboardInterrupt):
        execute(runs, archive, command=first)
    assert first.trained() == ["baseline-seed0", "tie_none-seed0"]
    assert sorted(p.name for p in archive.glob("*.json")) == ["baseline-seed0.greedy.json"]
    shutil.rmtree(tmp_path / "study")  # a fresh machine: outputs/ is gone, the committed archive is all there is
    second = FakeSeqlab()
    assert execute(runs, archive, command=second) == []
    assert second.trained() == ["tie_none-seed0", "baseline-seed1", "tie_none-seed1"]
    assert execute(runs, archive, command=(third := FakeSeqlab())) == [] and third.calls == []


def test_a_run_cut_off_mid_way_resumes_from_its_last_checkpoint(tmp_path: Path) -> None:
    (run,) = [r for r in study_runs(["positions"], 1, RECIPES["short"], tmp_path / "study") if r.variant == "baseline"]
    (run.folder / "checkpoints").mkdir(parents=True)
    (run.folder / "checkpoints" / "last.ckpt").write_bytes(b"half-way")
    fake = FakeSeqlab()
    assert execute([run], tmp_path / "archive", command=fake) == []
    assert f"train.resume={run.folder / 'checkpoints' / 'last.ckpt'}" in fake.calls[0]


def test_training_wall_time_sums_the_sittings_of_a_resumed_run() -> None:
    line = "[2026-01-01 00:00:00,000][seqlab.train.fit][INFO] - step {}  loss 5.0  lr 1e-3  900 tok/s  {}s  ETA 0:01:00"
    log = "\n".join([line.format(20, 15), line.format(40, 30), "other", line.format(60, 12), line.format(80, 25)])
    assert training_wall(log)[:2] == (55.0, 2)


def test_the_budget_is_the_first_validation_near_the_lowest() -> None:
    curve = [(300, 4.0), (600, 3.2), (900, 3.05), (1200, 3.03), (1500, 3.02), (1800, 3.04)]
    assert curve_budget(curve) == 1200  # 3.03 <= 3.02 + 0.02; 3.05 is not


def test_depth_failure_rule() -> None:
    def rec(variant: str, seed: int, loss: float, status: str = "ok") -> Record:
        return Record(variant, seed, "training", {}, [(1000, loss)], 0, 1000, {}, status=status)

    pre = [rec("pre", s, 4.0 + s / 100) for s in range(3)]
    assert depth_fails([rec("post", s, 4.0 + s / 100 + 0.02) for s in range(3)], pre)[0] is False
    assert depth_fails([rec("post", s, 4.5 + s / 100) for s in range(3)], pre)[0] is True
    one_diverged = [rec("post", 0, 4.0), rec("post", 1, float("nan"), "diverged")]
    assert depth_fails(one_diverged, pre) == (True, "diverged (seeds [1])")


def test_the_depth_table_gives_each_variants_mean_curve_at_the_steps_all_runs_validated() -> None:
    post, pre = "deep_post_nowarmup_lr1e-3", "deep_pre_nowarmup_lr1e-3"
    runs = {(post, 0): Record(post, 0, "training", {}, [(300, 6.0), (600, 7.0), (900, 8.0)], 0, 1000, {}),
            # cut off at 450 and resumed: it validated there too, a step the other run lacks
            (post, 1): Record(post, 1, "training", {}, [(300, 6.5), (450, 6.8), (600, 7.5), (900, 8.5)], 0, 1000, {}),
            (pre, 0): Record(pre, 0, "training", {}, [(300, 5.0), (600, 4.0), (900, 3.5)], 0, 1000, {}),
            (pre, 1): Record(pre, 1, "training", {}, [(300, 5.0), (600, 4.0), (900, float("nan"))], 0, 1000, {},
                             status="diverged")}
    text, data = QUESTIONS["depth"].numbers(Archived({}, runs, [], None))
    assert "| mean val loss at 300 / 600 / 900 |" in text.splitlines()[2]
    assert f"| {post} | 2 | 8.250 (8.000, 8.500) | 6.250 / 7.250 / 8.250 | 0 |" in text
    assert f"| {pre} | 2 | 3.500 (3.500, diverged) | 5.000 / 4.000 / 3.500 | 1 |" in text  # diverged: left out
    assert data["variants"][post]["mean_val_curve"] == [(300, 6.25), (600, 7.25), (900, 8.25)]
    assert set(data["variants"]) == {post, pre} and len(QUESTIONS["depth"].variants) == 8


def test_report_data_groups_seeds_and_carries_their_training_curves(tmp_path: Path) -> None:
    from seqlab.tracking.report import views

    make_study(tmp_path, {"baseline": {}, "tie_none": {"tie_embeddings": "none"}}, seeds=2)
    runs = views(load_results(tmp_path / "results"))
    assert sorted(r.name for r in runs) == [f"arch_{v}-seed{s}/greedy" for v in ("baseline", "tie_none")
                                            for s in (0, 1)]
    by_variant: dict[str, set] = {}
    for r in runs:  # seeds of a variant share its group (mean +- sd) and its training (one band of curves)
        by_variant.setdefault(r.name.split("-seed")[0], set()).add((r.group, r.training))
    assert all(len(v) == 1 for v in by_variant.values()) and len({*by_variant["arch_baseline"],
                                                                   *by_variant["arch_tie_none"]}) == 2
    assert all([s for s, _ in r.curves["val/loss"]] == [10, 20, 30] for r in runs)
    assert runs[0].metrics["rougeL"] == 10.0 and runs[0].link and runs[0].link.startswith("file://")


def test_report_shows_example_outputs_where_settings_disagree(tmp_path):
    make_study(tmp_path, {"baseline": {"tie_embeddings": "all"}, "tie_none": {"tie_embeddings": "none"}}, seeds=1)
    page = render(load_results(tmp_path / "results"))
    assert "Example outputs (2 settings; the 5 sources where they disagree most)" in page
    assert page.count("<table class='examples'>") == 1 and "arch_tie_none/greedy" in page


def test_report_marks_settings_that_differ_significantly_from_the_baseline(tmp_path):
    from seqlab.analysis.pairs import significance_marks

    make_study(tmp_path, {"baseline": {"tie_embeddings": "all"}, "tie_none": {"tie_embeddings": "none"}}, seeds=1)
    results = load_results(tmp_path / "results")
    marks = significance_marks(results)
    by_run = {r["checkpoint"]["run_name"]: marks[r["_path"]] for r in results}
    assert by_run["arch_baseline"] == "baseline" and by_run["arch_tie_none"].endswith(" *")  # 0.9 vs 0.5 kept
    assert " (p 0.00" in by_run["arch_tie_none"]  # bootstrap/AR p-values shown with the delta
    from seqlab.metrics import keys as K
    from seqlab.tracking.report import markdown_table

    for r in results:
        r["metrics"][K.ci(K.BLEU)] = [r["metrics"][K.BLEU] - 1, r["metrics"][K.BLEU] + 1]
    table = markdown_table(results, marks).splitlines()
    assert "bleu [95% CI]" in table[0]
    assert table[0].endswith("BLEU vs greedy (p: bootstrap 1,000 / randomization 1,000) |")
    row = next(line for line in table if by_run["arch_tie_none"] in line)
    bleu = row.split(" | ")[1]
    assert bleu.count("[") == 1 and bleu.count(",") == 1  # "0.90 [lo, hi]"


def test_runs_come_from_the_one_variant_table(tmp_path):
    runs = study_runs(["tying", "positions"], 2, RECIPES["short"], tmp_path)
    assert [r.name for r in runs] == [f"{v}-seed{s}" for s in (0, 1)
                                      for v in ("baseline", "tie_decoder", "tie_none", "learned_positions")]
    tie_none = runs[2]
    assert tie_none.train[-1:] == VARIANTS["tie_none"] and "seed=0" in tie_none.train
    assert f"hydra.run.dir={tmp_path / 'runs' / 'tie_none-seed0'}" in tie_none.train
    (greedy,) = tie_none.evaluations
    assert greedy.overrides[0] == "decoding=greedy" and greedy.results_dir == tmp_path / "results" / "greedy"
    assert {"engine=seqlab", "precision=fp32", "split=test"} <= set(greedy.overrides)
    trained = study_runs(["depth"], 1, RECIPES["trained"], tmp_path)
    assert len(trained) == 8 and all(not r.evaluations and r.labels() == ["training"] for r in trained)
    assert all("experiment=arch_study_trained" in r.train and "model.encoder_layers=6" in r.train for r in trained)


def test_the_grid_is_every_combination_each_decoded_twice(tmp_path):
    runs = grid_runs(1, tmp_path, "smoke", "null", 4, "g")
    assert len(runs) == 12 and len({r.name for r in runs}) == 12
    assert all(len(r.evaluations) == 2 and r.evaluations[1].overrides[0] == "decoding=beam" for r in runs)
    assert {o for r in runs for o in r.train if o.startswith("model.tie_embeddings=")} == {
        f"model.tie_embeddings={v}" for v in GRID["model.tie_embeddings"]}


def test_length_table_gives_each_buckets_bleu_over_seeds_and_skips_records_without_buckets() -> None:
    from seqlab.analysis.study_lengths import length_table
    from seqlab.metrics import keys as K

    def rec(variant: str, seed: int, with_buckets: bool = True) -> Record:
        metrics = {K.BLEU: 30.0}
        if with_buckets:
            for i, (label, _, _) in enumerate(K.LENGTH_BUCKETS):
                metrics[K.bucket(K.SHARE, label)] = 25.0
                if label != "src_gt64":  # an empty bucket has its share and no scores
                    metrics[K.bucket(K.BLEU, label)] = 40.0 - 10 * i + seed
        return Record(variant, seed, "beam5", metrics, [], 0, 0, {})

    text, data = length_table({"baseline": [rec("baseline", s) for s in range(3)],
                               "rope_positions": [rec("rope_positions", s) for s in range(3)]})
    assert "| <= 16 (25%) | 17-32 (25%) | 33-64 (25%) | > 64 (25%) |" in text
    assert data["baseline"]["src_17_32"]["mean"] == pytest.approx(31.0) and "src_gt64" not in data["baseline"]
    assert "| rope_positions | 41.00 ± 1.00 | 31.00 ± 1.00 | 21.00 ± 1.00 | – |" in text
    assert length_table({"baseline": [rec("baseline", 0, with_buckets=False)]}) == ("", {})


def test_the_archive_keeps_the_source_lengths_and_tests_each_bucket_on_its_own_sentences(tmp_path: Path) -> None:
    from sacrebleu.metrics import BLEU as SacreBLEU
    from sacrebleu.significance import PairedTest

    from seqlab.analysis.study import load_source_tokens
    from seqlab.metrics.significance import sacrebleu_seed

    archive, fake = tmp_path / "archive", FakeSeqlab()
    runs = [r for r in study_runs(["relative_positions"], 3, RECIPES["trained"], tmp_path / "study")
            if r.variant in ("baseline", "rope_positions")]
    assert execute(runs, archive, command=fake) == []
    assert load_source_tokens(archive) == SOURCE_LENGTHS
    text, numbers = table(archive, "relative_positions", "beam5")
    draw_curves(archive, {"relative_positions": QUESTIONS["relative_positions"]}, "beam5",
                load_records(archive, "training"))
    assert not (archive / "val_loss.relative_positions.png").exists()  # its other variants' runs are still to land
    by_length = numbers["by_length"]
    assert set(by_length) == {"bleu", "chrf", "comparisons"} and "chrF by source length" in text
    (cmp,) = by_length["comparisons"]
    longest, short = cmp["buckets"]["src_gt64"], cmp["buckets"]["src_le16"]
    assert longest["n_sentences"] == 11 and short["n_sentences"] == 3
    assert longest["verdict"] == "better" and all(t["p_bootstrap"] < 0.05 for t in longest["tests"])
    refs, idx = make_refs(), [i for i, n in enumerate(SOURCE_LENGTHS) if n > 64]
    hyps = {name: [load_records(archive, "beam5")[key].hypotheses[i] for i in idx]
            for name, key in (("base", ("baseline", 1)), ("rope", ("rope_positions", 1)))}
    with sacrebleu_seed(12345):  # sacreBLEU's own paired bootstrap on the bucket's sentences, seed 1
        _, result = PairedTest(list(hyps.items()), {"BLEU": SacreBLEU()}, [[refs[i] for i in idx]], test_type="bs",
                               n_samples=1000)()
    assert longest["tests"][1]["p_bootstrap"] == pytest.approx(result["BLEU"][1].p_value)
    assert longest["tests"][1]["delta"] == pytest.approx(result["BLEU"][1].score - result["BLEU"][0].score)
    assert "| rope_positions − baseline |" in text and "> 64 (11 sentences)" in text


def test_source_lengths_that_are_not_the_evaluations_fail_naming_the_record(tmp_path: Path) -> None:
    from seqlab.analysis.study import SOURCE_TOKENS, write_record
    from seqlab.analysis.study_lengths import check_lengths

    archive, fake = tmp_path / "archive", FakeSeqlab()
    runs = [r for r in study_runs(["tying"], 1, RECIPES["short"], tmp_path / "study") if r.variant == "baseline"]
    assert execute(runs, archive, command=fake) == []
    record = load_records(archive, "greedy")[("baseline", 0)]
    check_lengths([record], make_refs(), SOURCE_LENGTHS, "lengths.txt")  # the evaluation's own: no error
    with pytest.raises(ValueError, match=r"lengths.txt: baseline-seed0.greedy's \w+_src_\w+ is"):
        check_lengths([record], make_refs(), [n + 10 for n in SOURCE_LENGTHS], "lengths.txt")
    with pytest.raises(ValueError, match="29 source lengths for 30 test references"):
        check_lengths([record], make_refs(), SOURCE_LENGTHS[:-1], "lengths.txt")
    with pytest.raises(ValueError, match=f"another test set than .*{SOURCE_TOKENS}"):
        write_record(archive, record, make_refs(), [1] * 30)


def test_the_study_dashboard_is_the_reports_page_from_the_archive_alone(tmp_path: Path) -> None:
    from seqlab.analysis.study_report import record_view, write_study_report
    from seqlab.tracking.dashboard import page_data

    archive, fake = tmp_path / "archive", FakeSeqlab()
    runs = [r for r in study_runs(["tying"], 2, RECIPES["short"], tmp_path / "study") if r.variant != "tie_decoder"]
    assert execute(runs, archive, command=fake) == []
    shutil.rmtree(tmp_path / "study")  # the run folders are gone: the archive is enough
    page = write_study_report(archive, ["greedy"], tmp_path / "report.html", "the study")
    data = json.loads(page.with_suffix(".json").read_text())
    assert sorted(r["name"] for r in data["runs"]) == [f"{v}-seed{s}/greedy" for v in ("baseline", "tie_none")
                                                      for s in (0, 1)]
    assert all(r["curves"]["val/loss"] and r["training"] == r["config"]["run"] for r in data["runs"])
    # A training decoded twice (beam 5 and greedy) is one curve, and its seeds form the variant's band
    record = load_records(archive, "greedy")[("baseline", 0)]
    twice = page_data([record_view(record, 0), record_view(replace(record, label="beam5"), 1)], [], "x")["runs"]
    assert twice[0]["curves"] and not twice[1]["curves"] and twice[0]["link"] == twice[1]["link"] == "baseline-seed0"
    (pairs,) = data["pairs"]
    assert pairs["mode"] == "all" and len({(t["a"], t["b"]) for t in pairs["tests"]}) == 4 * 3 // 2
    # BLEU and chrF per source-length bucket are a "+ column" away, not shown at first
    assert {"bleu_src_gt64", "chrf_src_le16"} <= set(data["metrics"]) - set(data["shown_metrics"])
    assert data["metric_names"]["bleu_src_gt64"] == "BLEU src > 64"
    assert 'id="report-data"' in page.read_text() and write_study_report(tmp_path, ["greedy"], page, "x") is None


def test_the_curve_is_one_run_whatever_the_seeds(tmp_path):
    runs = study_runs(["curve"], 3, RECIPES["trained"], tmp_path)
    assert [r.name for r in runs] == ["curve-seed0"] and "trainer.max_steps=6300" in runs[0].train
    both = study_runs(["curve", "positions"], 2, RECIPES["trained"], tmp_path)
    assert [r.name for r in both] == ["curve-seed0", "baseline-seed0", "learned_positions-seed0", "baseline-seed1",
                                      "learned_positions-seed1"]


def test_seeds_curves_meet_on_the_steps_they_share():
    resumed = [(300, 5.0), (433, 4.8), (600, 4.1), (900, 3.6)]  # stopped at 433 and resumed: one more validation
    steps, values = common_steps([[(300, 5.1), (600, 4.2), (900, 3.7)], resumed])
    assert steps == [300, 600, 900] and values == [(5.1, 5.0), (4.2, 4.1), (3.7, 3.6)]


def test_the_machines_table_says_which_cpu_trained_which_run_and_how_fast() -> None:
    def run(variant: str, seed: int, cpu: str, flags: list[str], wall_s: float) -> Record:
        training = {"cpu": cpu, "cpu_flags": flags, "wall_s": wall_s}
        return Record(variant, seed, "training", {}, [(3300, 3.0)], 1, 3300, {}, training=training)

    epyc, xeon = ["avx2", "avx512f", "avx512_bf16"], ["avx512_bf16", "amx_bf16", "amx_tile"]
    runs = {("baseline", 0): run("baseline", 0, "AMD EPYC", epyc, 1650.0),
            ("pre", 0): run("pre", 0, "AMD EPYC", epyc, 1100.0),
            ("baseline", 1): run("baseline", 1, "AMD EPYC", epyc, 3300.0),
            ("pre", 1): run("pre", 1, "Intel Xeon", xeon, 1320.0)}
    table, data = machines_table(runs)
    assert "| AMD EPYC (avx512_bf16) | 3 | 2.00 | baseline 0, 1; pre 0 |" in table  # median of 1, 2 and 3
    assert "| Intel Xeon (avx512_bf16, amx_bf16) | 1 | 2.50 | pre 1 |" in table
    assert data["Intel Xeon (avx512_bf16, amx_bf16)"] == {"runs": ["pre-seed1"], "updates_per_s": 2.5}
    assert machines_table({}) == ("", {})


def test_the_trained_studys_page_shows_a_question_once_all_its_runs_are_archived(tmp_path: Path) -> None:
    from pipelines.arch_study_trained import claims, design, headline, section

    results, fake = tmp_path / "results", FakeSeqlab()
    trained, short = results / "arch_study_trained", results / "arch_study"
    runs = study_runs(list(STUDY), 3, RECIPES["trained"], tmp_path / "trained")
    assert runs[-1].name == "learned_positions-seed2"  # the positions question's last run
    assert execute(runs[:-1], trained, command=fake) == []
    page = design(trained)
    assert "**Tied embeddings: none / decoder / all**" in page and "| tie_none − baseline |" in page
    assert "_Sinusoidal vs learned positions: pending; its table joins this page once all 6 of its runs" in page
    assert "machines" not in page and claims(trained).startswith("_The verdicts join this page once")
    assert "| baseline, seed 0 | 30 | beam5 |" in headline(trained)  # the README: the first run until then
    assert execute(runs, trained, command=fake) == []
    assert execute(study_runs(list(STUDY), 3, RECIPES["short"], tmp_path / "short"), short, command=fake) == []
    page = design(trained)
    assert "pending" not in page and "(../../results/arch_study_trained/val_loss.beam5.png)" in page
    for q in STUDY:  # each question's table, by its own function
        assert table(trained, q, "beam5")[0] in page
    assert "**The machines that trained the runs**" in page
    verdicts = claims(trained)
    assert "**Against the papers** (beam 5)" in verdicts and "| Tying all embeddings costs no quality |" in verdicts
    assert "**Early vs trained**" in verdicts and "| tie_none − baseline |" in verdicts
    assert section("depth", trained).startswith("_6+6 layers") and "pending" in section("relative_positions", trained)
    readme = headline(trained)  # every variant, mean ± sd over 3 seeds
    assert "| variant (30 updates) | val loss | beam-5 BLEU | greedy BLEU |" in readme
    assert "| tie_none (no tying) | 3.510 ± 0.010 |" in readme and readme.count("\n| ") == 8


def test_seqlab_study_prints_the_tables_the_docs_render_and_draws_the_curves(tmp_path: Path, capsys) -> None:
    """`seqlab study QUESTION --from-archive` prints the asked questions' tables and claims by the functions and
    tests the docs are rendered with, draws the figures into the archive and writes no other file there."""
    from seqlab.app.study import main

    archive, fake = tmp_path / "archive", FakeSeqlab()
    runs = [r for r in study_runs(["tying"], 3, RECIPES["trained"], tmp_path / "study") if r.variant != "tie_decoder"]
    assert execute(runs, archive, command=fake) == []
    before = {p.name for p in archive.iterdir()}
    args = ["--recipe", "trained", "--from-archive", "--archive", str(archive), "--dir", str(tmp_path / "study")]
    assert main(["tying", *args]) == 0
    out = capsys.readouterr().out
    assert table(archive, "tying", "beam5")[0] in out and "| Tying all embeddings costs no quality |" in out
    assert {p.name for p in archive.iterdir()} - before == {"val_loss.beam5.png"}
    assert main(["depth", *args]) == 0 and capsys.readouterr().out.strip() == ""  # no depth run archived


def test_the_depth_question_renders_its_table_curves_and_claim(tmp_path: Path) -> None:
    import torch

    from pipelines.arch_study_trained import section
    from seqlab.analysis.study_questions import claims_table

    class Trainer(FakeSeqlab):
        """Its trainings leave a checkpoint that describes the model: an undecoded run's record reads it."""

        def __call__(self, command: str, *args: str) -> bool:
            done = super().__call__(command, *args)
            folder = Path(dict(a.split("=", 1) for a in args if "=" in a)["hydra.run.dir"])
            model = ModelConfig(src_vocab_size=100, d_model=16, n_heads=2, d_ff=32).to_dict()
            torch.save({"seqlab": {"model_config": model, "step": 30, "git_revision": "0123abc"}, "state_dict": {}},
                       folder / "checkpoints" / "last.ckpt")
            return done

    archive, fake = tmp_path / "arch_study_trained", Trainer()
    runs = study_runs(["depth"], 3, RECIPES["trained"], tmp_path / "study")
    assert len(runs) == 24 and execute(runs[:-1], archive, command=fake) == []
    assert section("depth", archive).startswith("_6+6 layers") and fake.calls[-1][0] == "train"  # training alone
    assert execute(runs, archive, command=fake) == []
    text, numbers = table(archive, "depth", "beam5")
    draw_curves(archive, {"depth": QUESTIONS["depth"]}, "beam5", load_records(archive, "training"))
    assert (archive / "val_loss.depth.png").stat().st_size > 1000
    page = section("depth", archive)
    assert page.startswith(text) and page.endswith("a panel per learning rate](../../results/arch_study_trained/"
                                                   "val_loss.depth.png)")
    assert "| deep_post_nowarmup_lr2e-3 vs deep_pre_nowarmup_lr2e-3 | no |" in page  # the fake runs are level
    assert claims_table({"depth": numbers}).endswith("| disagrees |")  # post-LN never fails without warm-up here


def test_a_question_declared_as_data_runs_renders_and_joins_the_trained_page(tmp_path: Path, monkeypatch) -> None:
    """What docs/ARCHITECTURE.md walks through: a new question (ReLU vs GELU) is a variant and a Question in
    seqlab.analysis.study_questions and nothing else; the runner trains and decodes its runs, the tables render
    from the archive, and the trained study's page shows it pending, then its table, with no code naming it."""
    import pipelines.arch_study_trained as page
    from seqlab.analysis.study_questions import Question

    monkeypatch.setitem(VARIANTS, "gelu", ("model.activation=gelu",))
    monkeypatch.setitem(QUESTIONS, "activation", Question("ReLU vs GELU", ["baseline", "gelu"],
                                                          [("baseline", "gelu")], recipes=("trained",)))
    archive, fake = tmp_path / "archive", FakeSeqlab()
    runs = study_runs(["activation"], 3, RECIPES["short"], tmp_path / "study")
    assert [r.name for r in runs] == [f"{v}-seed{s}" for s in range(3) for v in ("baseline", "gelu")]
    assert "model.activation=gelu" in runs[1].train
    assert page.section("activation", archive).startswith("_ReLU vs GELU: pending")  # nothing archived yet
    assert execute(runs, archive, command=fake) == []
    text = table(archive, "activation", "greedy")[0]
    assert "**ReLU vs GELU**" in text and "| gelu − baseline |" in text
    draw_curves(archive, {"activation": QUESTIONS["activation"]}, "greedy", load_records(archive, "training"))
    monkeypatch.setattr(page, "REPORTED", "greedy")  # the fake runner decodes the short recipe's setting
    shown = page.section("activation", archive)  # its table, then its own validation curves
    assert shown == text + "\n\n![Validation loss of the question's runs, mean and range over seeds]" \
                           "(../../results/archive/val_loss.activation.png)"
    assert (archive / "val_loss.activation.png").is_file()
