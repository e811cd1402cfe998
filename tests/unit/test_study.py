"""The architecture study's archive and tables, and the report's seed aggregation, on a synthetic study folder."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from sacrebleu.metrics import BLEU

import seqlab.app.runner
from seqlab.analysis.study import GRID, RECIPES, VARIANTS, Archived, Record, curve_budget, load_records
from seqlab.analysis.study_questions import QUESTIONS, STUDY
from seqlab.analysis.study_stages import grid_pipeline, study_stages
from seqlab.analysis.study_tables import common_steps, depth_fails, draw_curves, machines_table
from seqlab.app.runner import execute, plan
from seqlab.metrics import by_source_length, sacrebleu_scores
from seqlab.model import ModelConfig
from seqlab.model.params import analytic_counts
from seqlab.pipeline.core import Pipeline
from seqlab.pipeline.training import training_wall
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
    """`seqlab train` / `seqlab evaluate` as the pipeline runner calls them, without training: each leaves the
    files the real command leaves (a checkpoint that describes its model and run); `stop_at` raises
    KeyboardInterrupt at that run's training (a session's end)."""

    def __init__(self, stop_at: str | None = None, diverge: dict[str, int] | None = None) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.stop_at, self.refs, self.diverge = stop_at, make_refs(), diverge or {}

    def __call__(self, command: str, *args: str) -> bool:
        self.calls.append((command, *args))
        values = dict(a.split("=", 1) for a in args if "=" in a)
        if command == "train":
            run_dir, variant, seed = Path(values["hydra.run.dir"]), values["run_name"].removeprefix("arch_"), \
                int(values["seed"])
            if f"{variant}-seed{seed}" == self.stop_at:
                raise KeyboardInterrupt
            write_training(run_dir, variant, seed)
            if f"{variant}-seed{seed}" in self.diverge:  # as seqlab train stops at a non-finite loss
                with (run_dir / "train.log").open("a") as log:
                    log.write(f"non-finite loss at step {self.diverge[f'{variant}-seed{seed}']}\n")
                return False
            (run_dir / "checkpoints").mkdir(exist_ok=True)
            model = ModelConfig(src_vocab_size=100, d_model=16, n_heads=2, d_ff=32, encoder_layers=1,
                                decoder_layers=1, **model_delta(variant)).to_dict()
            torch.save({"seqlab": {"model_config": model, "step": 30, "git_revision": "0123abc",
                                   "run_config": {"run_name": values["run_name"], "seed": seed}},
                        "state_dict": {}, "global_step": 30}, run_dir / "checkpoints" / "last.ckpt")
            return True
        assert values["ckpt"].endswith("checkpoints/last.ckpt")  # decoded after exactly the recipe's updates
        run = torch.load(values["ckpt"], weights_only=True)["seqlab"]["run_config"]
        variant = run["run_name"].removeprefix("arch_")
        write_evaluation(Path(values["results_dir"]), Path(values["ckpt"]).parent.parent, variant, run["seed"],
                         self.refs, model_delta(variant), label=values["decoding"])
        return True

    def trained(self) -> list[str]:
        return [f"{dict(a.split('=', 1) for a in c[1:] if '=' in a)['run_name'].removeprefix('arch_')}-seed"
                f"{dict(a.split('=', 1) for a in c[1:] if '=' in a)['seed']}" for c in self.calls if c[0] == "train"]


def model_delta(variant: str) -> dict:
    return {"tie_embeddings": "none"} if variant == "tie_none" else {}


def run_study(archive: Path, questions: list[str], seeds: int, recipe: str, fake: FakeSeqlab,
              runs: Callable[[str], bool] = lambda run: True) -> list[str]:
    """The questions' stages at `recipe` (those of the runs `runs` keeps), run by the pipeline runner with
    `fake` for seqlab, archived in `archive`; what failed."""
    stages = tuple(s for s in study_stages(questions, RECIPES[recipe], seeds) if runs(s.name.split(".")[0]))
    return execute(Pipeline(archive.name, "a test", stages, folder=archive), fake)


@pytest.fixture(autouse=True)
def stage_folders(tmp_path: Path, monkeypatch) -> Path:
    """The runner's stage folders (outputs/pipelines/ in a checkout) in the test's own folder."""
    monkeypatch.setattr(seqlab.app.runner, "OUTPUTS", tmp_path / "outputs")
    return tmp_path / "outputs"


def table(archive: Path, question: str, label: str) -> tuple[str, dict]:
    """A question's table and numbers from the archive, by its own table function."""
    return QUESTIONS[question].numbers(Archived.load(archive, label))


def test_study_tables_from_the_runs_and_from_the_archive_alone(tmp_path: Path, stage_folders: Path) -> None:
    archive, fake = tmp_path / "archive", FakeSeqlab()
    assert run_study(archive, ["tying"], 3, "short", fake, lambda run: not run.startswith("tie_decoder")) == []
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
    decoded = {}  # each evaluation's rows as `seqlab evaluate` left them in its stage folder
    for path in stage_folders.glob("evaluate-*/**/metrics.json"):
        ckpt = json.loads(path.read_text())["checkpoint"]
        decoded[(ckpt["variant"], ckpt["seed"])] = [json.loads(line) for line in
                                                    (path.parent / "hypotheses.jsonl").read_text().splitlines()]
    refs = [r["reference"] for r in decoded[("baseline", 0)]]
    bleu = {v: [BLEU().corpus_score([r["hypothesis"] for r in decoded[(v, s)]], [refs]).score for s in range(3)]
            for v in ("baseline", "tie_none")}
    assert cmp["bleu"]["delta"] == pytest.approx(sum(bleu["tie_none"]) / 3 - sum(bleu["baseline"]) / 3)
    assert cmp["bleu"]["exceeds_spread"] and cmp["val_loss"]["delta"] == pytest.approx(0.5)
    assert set(cmp["p_test_bleu"]) == {f"tie_none-seed{s}" for s in range(3)}
    alone = tmp_path / "copied"  # the records alone, on a machine without the runs' folders
    shutil.copytree(archive, alone, ignore=shutil.ignore_patterns("*.png"))
    shutil.rmtree(stage_folders)
    assert table(alone, "tying", "greedy")[0] == text  # the archive alone regenerates the tables


def test_each_record_names_its_provenance(tmp_path: Path) -> None:
    archive, fake = tmp_path / "archive", FakeSeqlab()
    assert run_study(archive, ["positions"], 1, "trained", fake, lambda run: run == "baseline-seed0") == []
    beam, greedy = (json.loads((archive / f"baseline-seed0.{label}.json").read_text()) for label in ("beam5", "greedy"))
    assert beam["stage"] == "baseline-seed0.beam5" and greedy["stage"] == "baseline-seed0.greedy"  # one per decoding
    assert beam["result"]["metrics"] != greedy["result"]["metrics"] and beam["digest"] != greedy["digest"]
    assert beam["result"]["outputs"]["hypotheses"] == "baseline-seed0.beam5.hyps.txt.gz"
    training = json.loads((archive / "baseline-seed0.json").read_text())  # the training: its own record, once
    train, decode = training["manifest"], beam["manifest"]
    assert train["precision"] == "bf16-mixed" and train["wall_s"] == 30.0 and train["updates"] == 30
    assert train["command"].startswith("seqlab train experiment=arch_study_trained seed=0 run_name=arch_baseline")
    assert training["result"]["params"] == analytic_counts(ModelConfig.from_dict(training["result"]["model"])).total
    assert decode["precision"] == "fp32" and decode["engine"] == "seqlab" and "decoding=beam" in decode["command"]
    assert decode["cpu"] and decode["torch"] and decode["date"].endswith("Z")
    record = load_records(archive, "beam5")[("baseline", 0)]  # what the tables read: the two joined
    assert record.training == train and record.evaluation == decode and record.steps == 30
    assert len(record.hypotheses) == 30 and len(record.val_curve) == 3


def test_a_stopped_study_resumes_from_the_archive_without_retraining(tmp_path: Path, stage_folders: Path) -> None:
    archive = tmp_path / "archive"

    def runs(run: str) -> bool:
        return not run.startswith("tie_decoder")

    first = FakeSeqlab(stop_at="tie_none-seed0")
    with pytest.raises(KeyboardInterrupt):
        run_study(archive, ["tying"], 2, "short", first, runs)
    assert first.trained() == ["baseline-seed0", "tie_none-seed0"]
    assert sorted(p.name for p in archive.glob("*.json")) == ["baseline-seed0.greedy.json", "baseline-seed0.json"]
    shutil.rmtree(stage_folders)  # a fresh machine: outputs/ is gone, the committed archive is all there is
    second = FakeSeqlab()
    assert run_study(archive, ["tying"], 2, "short", second, runs) == []
    assert second.trained() == ["tie_none-seed0", "baseline-seed1", "tie_none-seed1"]
    assert run_study(archive, ["tying"], 2, "short", (third := FakeSeqlab()), runs) == [] and third.calls == []


def test_a_run_cut_off_mid_way_resumes_from_its_last_checkpoint(tmp_path: Path) -> None:
    stages = tuple(s for s in study_stages(["positions"], RECIPES["short"], 1) if s.name.startswith("baseline"))
    pipeline = Pipeline("archive", "a test", stages, folder=tmp_path / "archive")
    (training, _) = plan(pipeline)
    (training.folder / "checkpoints").mkdir(parents=True)
    (training.folder / "checkpoints" / "last.ckpt").write_bytes(b"half-way")
    fake = FakeSeqlab()
    assert execute(pipeline, fake) == []
    assert f"train.resume={training.folder / 'checkpoints' / 'last.ckpt'}" in fake.calls[0]
    assert execute(pipeline, fake, rerun=frozenset({"baseline-seed0"})) == []  # rerun by name: starts over
    assert not any(a.startswith("train.resume=") for a in fake.calls[-2])


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


def test_runs_come_from_the_one_variant_table():
    stages = study_stages(["tying", "positions"], RECIPES["short"], 2)
    assert [s.name for s in stages if s.command == "train"] == [
        f"{v}-seed{s}" for s in (0, 1) for v in ("baseline", "tie_decoder", "tie_none", "learned_positions")]
    tie_none = next(s for s in stages if s.name == "tie_none-seed0")
    assert tie_none.overrides[-1:] == VARIANTS["tie_none"] and "seed=0" in tie_none.overrides
    (greedy,) = [s for s in stages if s.after == "tie_none-seed0"]
    assert greedy.name == "tie_none-seed0.greedy" and greedy.overrides[0] == "decoding=greedy"
    assert greedy.checkpoint == "last" and {"engine=seqlab", "precision=fp32", "split=test"} <= set(greedy.overrides)
    trained = study_stages(["depth"], RECIPES["trained"], 1)  # judged on training alone: not decoded
    assert len(trained) == 8 and all(s.command == "train" and s.diverges for s in trained)
    assert all("experiment=arch_study_trained" in s.overrides and "model.encoder_layers=6" in s.overrides
               for s in trained)


def test_the_grid_is_every_combination_each_decoded_twice(tmp_path):
    pipeline = grid_pipeline(tmp_path, 1, "smoke", 40, "32", 4, "g")
    trains = [s for s in pipeline.stages if s.command == "train"]
    assert len(trains) == 12 and len(pipeline.stages) == 36 and pipeline.archive == tmp_path
    assert all([e.overrides[0] for e in pipeline.stages if e.after == t.name] == ["decoding=greedy", "decoding=beam"]
               for t in trains)
    assert {o for t in trains for o in t.overrides if o.startswith("model.tie_embeddings=")} == {
        f"model.tie_embeddings={v}" for v in GRID["model.tie_embeddings"]}
    assert all({"trainer.max_steps=40", "trainer.precision=32"} <= set(t.overrides) for t in trains)
    assert len({p.digest for p in plan(pipeline)}) == 36  # fixed updates, pinned precision: one digest each


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
    assert run_study(archive, ["relative_positions"], 3, "trained", fake,
                     lambda run: run.split("-seed")[0] in ("baseline", "rope_positions")) == []
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
    from seqlab.analysis.study_lengths import check_lengths

    archive, fake = tmp_path / "archive", FakeSeqlab()
    assert run_study(archive, ["tying"], 1, "short", fake, lambda run: run == "baseline-seed0") == []
    record = load_records(archive, "greedy")[("baseline", 0)]
    check_lengths([record], make_refs(), SOURCE_LENGTHS, "lengths.txt")  # the evaluation's own: no error
    with pytest.raises(ValueError, match=r"lengths.txt: baseline-seed0.greedy's \w+_src_\w+ is"):
        check_lengths([record], make_refs(), [n + 10 for n in SOURCE_LENGTHS], "lengths.txt")
    with pytest.raises(ValueError, match="29 source lengths for 30 test references"):
        check_lengths([record], make_refs(), SOURCE_LENGTHS[:-1], "lengths.txt")


def test_the_study_dashboard_is_the_reports_page_from_the_archive_alone(tmp_path: Path, stage_folders: Path) -> None:
    from seqlab.analysis.study_report import record_view, write_study_report
    from seqlab.tracking.dashboard import page_data

    archive, fake = tmp_path / "archive", FakeSeqlab()
    assert run_study(archive, ["tying"], 2, "short", fake, lambda run: not run.startswith("tie_decoder")) == []
    shutil.rmtree(stage_folders)  # the run folders are gone: the archive is enough
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


def test_the_curve_is_one_run_whatever_the_seeds():
    (curve, *_) = stages = study_stages(["curve"], RECIPES["trained"], 3)
    assert [s.name for s in stages] == ["curve-seed0", "curve-seed0.beam5", "curve-seed0.greedy"]
    assert "trainer.max_steps=6300" in curve.overrides
    both = study_stages(["curve", "positions"], RECIPES["trained"], 2)
    assert [s.name for s in both if s.command == "train"] == [
        "curve-seed0", "baseline-seed0", "learned_positions-seed0", "baseline-seed1", "learned_positions-seed1"]


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


@pytest.mark.slow
def test_the_trained_studys_page_shows_a_question_once_all_its_runs_are_archived(tmp_path: Path) -> None:
    from pipelines.arch_study_trained import claims, design, headline, section

    results, fake = tmp_path / "results", FakeSeqlab()
    trained, short = results / "arch_study_trained", results / "arch_study"
    last = [s.name for s in study_stages(list(STUDY), RECIPES["trained"]) if s.command == "train"][-1]
    assert last == "learned_positions-seed2"  # the positions question's last run
    assert run_study(trained, list(STUDY), 3, "trained", fake, lambda run: run != last) == []
    page = design(trained)
    assert "**Tied embeddings: none / decoder / all**" in page and "| tie_none − baseline |" in page
    assert "_Sinusoidal vs learned positions: pending; its table joins this page once all 6 of its runs" in page
    assert "machines" not in page and claims(trained).startswith("_The verdicts join this page once")
    assert "| baseline, seed 0 | 30 | beam5 |" in headline(trained)  # the README: the first run until then
    assert run_study(trained, list(STUDY), 3, "trained", fake) == []
    assert run_study(short, list(STUDY), 3, "short", fake) == []
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


@pytest.mark.slow
def test_seqlab_study_prints_the_tables_the_docs_render_and_draws_the_curves(tmp_path: Path, capsys) -> None:
    """`seqlab study QUESTION --from-archive` prints the asked questions' tables and claims by the functions and
    tests the docs are rendered with, draws the figures into the archive and writes no other file there."""
    from seqlab.app.study import main

    archive, fake = tmp_path / "archive", FakeSeqlab()
    assert run_study(archive, ["tying"], 3, "trained", fake, lambda run: not run.startswith("tie_decoder")) == []
    before = {p.name for p in archive.iterdir()}
    args = ["--recipe", "trained", "--from-archive", "--archive", str(archive)]
    assert main(["tying", *args]) == 0
    out = capsys.readouterr().out
    assert table(archive, "tying", "beam5")[0] in out and "| Tying all embeddings costs no quality |" in out
    assert {p.name for p in archive.iterdir()} - before == {"val_loss.beam5.png"}
    assert main(["depth", *args]) == 0 and capsys.readouterr().out.strip() == ""  # no depth run archived


def test_seqlab_study_runs_the_questions_through_the_pipeline_runner(tmp_path: Path, capsys, monkeypatch) -> None:
    """`seqlab study QUESTION` runs what the archive lacks as the pipelines do, then prints the tables."""
    from seqlab.app.study import main

    monkeypatch.chdir(tmp_path)  # its dashboard goes to outputs/<archive>/
    archive, fake = tmp_path / "archive", FakeSeqlab()
    args = ["tying", "--seeds", "1", "--archive", str(archive)]
    assert main([*args, "--dry-run"], command=fake) == 0 and fake.calls == [] and not archive.exists()
    assert main(args, command=fake) == 0
    assert fake.trained() == ["baseline-seed0", "tie_decoder-seed0", "tie_none-seed0"]
    assert table(archive, "tying", "greedy")[0] in capsys.readouterr().out
    assert (tmp_path / "outputs" / "archive" / "report.html").is_file()
    assert main(args, command=(again := FakeSeqlab())) == 0 and again.calls == []  # all archived


@pytest.mark.slow  # the question declared as data runs, renders and joins the page in the default run
def test_the_depth_question_renders_its_table_curves_and_claim(tmp_path: Path) -> None:
    from pipelines.arch_study_trained import section
    from seqlab.analysis.study_questions import claims_table

    archive = tmp_path / "arch_study_trained"
    fake = FakeSeqlab(diverge={"deep_post_nowarmup_lr2e-3-seed1": 12})
    last = [s.name for s in study_stages(["depth"], RECIPES["trained"])][-1]
    assert run_study(archive, ["depth"], 3, "trained", fake, lambda run: run != last) == []
    assert section("depth", archive).startswith("_6+6 layers") and fake.calls[-1][0] == "train"  # training alone
    assert run_study(archive, ["depth"], 3, "trained", fake) == []  # a diverged training is a result, archived
    diverged = json.loads((archive / "deep_post_nowarmup_lr2e-3-seed1.json").read_text())
    assert diverged["status"] == "diverged" and diverged["result"]["steps"] == 12
    text, numbers = table(archive, "depth", "beam5")
    draw_curves(archive, {"depth": QUESTIONS["depth"]}, "beam5", load_records(archive, "training"))
    assert (archive / "val_loss.depth.png").stat().st_size > 1000
    page = section("depth", archive)
    assert page.startswith(text) and page.endswith("a panel per learning rate](../../results/arch_study_trained/"
                                                   "val_loss.depth.png)")
    assert "| deep_post_nowarmup_lr2e-3 | 3 | 3.010 (3.000, diverged, 3.020) |" in page  # kept, marked
    assert "| deep_post_nowarmup_lr2e-3 vs deep_pre_nowarmup_lr2e-3 | yes | diverged (seeds [1]) |" in page
    assert "| deep_post_nowarmup_lr1e-3 vs deep_pre_nowarmup_lr1e-3 | no |" in page  # the fake runs are level
    assert claims_table({"depth": numbers}).endswith("| agrees |")  # post-LN fails without warm-up at 2e-3


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
    stages = study_stages(["activation"], RECIPES["short"])
    assert [s.name for s in stages if s.command == "train"] == [f"{v}-seed{s}" for s in range(3)
                                                                for v in ("baseline", "gelu")]
    assert "model.activation=gelu" in stages[2].overrides
    assert page.section("activation", archive).startswith("_ReLU vs GELU: pending")  # nothing archived yet
    assert run_study(archive, ["activation"], 3, "short", fake) == []
    text = table(archive, "activation", "greedy")[0]
    assert "**ReLU vs GELU**" in text and "| gelu − baseline |" in text
    draw_curves(archive, {"activation": QUESTIONS["activation"]}, "greedy", load_records(archive, "training"))
    monkeypatch.setattr(page, "REPORTED", "greedy")  # the fake runner decodes the short recipe's setting
    shown = page.section("activation", archive)  # its table, then its own validation curves
    assert shown == text + "\n\n![Validation loss of the question's runs, mean and range over seeds]" \
                           "(../../results/archive/val_loss.activation.png)"
    assert (archive / "val_loss.activation.png").is_file()


def test_the_converter_moves_the_study_runners_records_to_the_one_format_leaving_every_table_as_it_was(
        tmp_path: Path) -> None:
    """`python -m pipelines.convert_study`: records the study's own runner wrote (one per run and decoding, the
    training's curve and provenance in each) become the records the pipeline runner writes for the same
    stages, digests included, without retraining; the tables read from them are byte-identical."""
    from pipelines.convert_study import convert

    archive = tmp_path / "arch_study"
    assert run_study(archive, ["tying"], 3, "short", FakeSeqlab()) == []
    old = tmp_path / "old" / "arch_study"  # the same runs as the study's runner archived them
    old.mkdir(parents=True)
    for (variant, seed), r in load_records(archive, "greedy").items():
        (old / f"{r.name}.greedy.json").write_text(json.dumps({
            "variant": variant, "seed": seed, "label": "greedy", "status": "ok", "metrics": r.metrics,
            "val_curve": r.val_curve, "params": r.params, "steps": r.steps, "model": r.model, "training": r.training,
            "evaluation": r.evaluation}))
        shutil.copy(archive / f"{r.name}.greedy.hyps.txt.gz", old)
    for name in ("test.references.txt.gz", "test.source_tokens.txt.gz"):
        shutil.copy(archive / name, old)
    pipeline = Pipeline("arch_study", "the short study", study_stages(["tying"], RECIPES["short"]), folder=old)
    assert len(convert(old, pipeline)) == 18 and convert(old, pipeline) == []  # once; a second time: nothing to do

    def records(folder: Path) -> dict[str, dict]:
        found = {p.name: json.loads(p.read_text()) for p in folder.glob("*.json")}
        for record in found.values():
            record["result"].pop("decoding", None)  # the study's runner did not record the decoding's settings
            record["result"].pop("train_curve", None)  # ... nor the training loss
        return found

    assert records(old) == records(archive)
    assert table(old, "tying", "greedy")[0] == table(archive, "tying", "greedy")[0]
