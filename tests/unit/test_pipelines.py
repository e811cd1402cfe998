"""The experiments as pipelines: stages resolve to fixed configs, a stage is skipped when its archived result
has the same digest, a changed decoding reruns only its evaluation, a failed stage is never marked done,
and every generated table in the docs equals what rendering its archive gives now."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import seqlab.app.runner
import seqlab.pipeline.core
from pipelines import PIPELINES
from pipelines.core import compared
from pipelines.render import render
from pipelines.tables import decodings_table
from seqlab.app.runner import PipelineError, execute, plan
from seqlab.io import atomic_write_lines_gz, read_lines_gz
from seqlab.pipeline.core import Pipeline, Stage, Table

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ("experiment=smoke", "trainer.max_steps=2", "trainer.max_time=null", "trainer.precision=32")
EVAL = ("split=test", "precision=fp32", "engine=seqlab")


class FakeSeqlab:
    """`seqlab train` and `seqlab evaluate` as a pipeline calls them, leaving the files they leave."""

    def __init__(self, fail: str | None = None, busy: float = 0.0) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.fail = fail
        self.busy = busy  # the cores a bench finds other processes keeping busy
        self.marks: list[int] = []  # one value per evaluation, in every metric a table may show

    def __call__(self, command: str, *args: str) -> bool:
        self.calls.append((command, *args))
        values = dict(a.split("=", 1) for a in args if "=" in a)
        if self.fail and any(self.fail in a for a in args):
            return False
        if command == "train":
            where = Path(values["hydra.run.dir"])
            (where / "csv").mkdir(parents=True, exist_ok=True)
            (where / "checkpoints").mkdir(exist_ok=True)
            torch.save({"seqlab": {}, "state_dict": {}, "global_step": int(values.get("trainer.max_steps", 2))},
                       where / "checkpoints" / "last.ckpt")
            # validated after update 1 only: the run's 2 updates go past its last validation
            (where / "csv" / "metrics.csv").write_text("epoch,step,val/loss\n0,0,5.0\n")
            return True
        if command == "bench":
            Path(values["out"]).write_text(json.dumps({"others_busy_cores": self.busy}))
            return True
        if command == "distill":
            out = Path(values["out"])
            atomic_write_lines_gz(out / "train.jsonl.gz", [json.dumps({"id": "1", "source": "s", "target": "t"})])
            (out / "distill.json").write_text(json.dumps({"examples": 1, "label": "beam5", "step": 2}))
            return True
        if command == "export":  # the family folder, as `seqlab export --ckpt C --out DIR` writes it
            out = Path(args[args.index("--out") + 1])
            out.mkdir(parents=True)
            (out / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
            return True
        if command == "import":  # ... and read back (`seqlab import --hf DIR --out FILE`)
            torch.save({"state_dict": {}, "seqlab": {"family": "llama", "model_config": {"start": "prompt"},
                                                     "tokenizer": {"chat": {"template": "{{ x }}"}}}},
                       args[args.index("--out") + 1])
            return True
        if command == "compare":
            folders = [Path(a) for a in args[:args.index("--json")]]
            assert all((f / "hypotheses.jsonl").is_file() or f.suffix == ".json" for f in folders)
            names = [json.loads(f.read_text())["stage"] if f.suffix == ".json" else
                     json.loads((f / "metrics.json").read_text())["label"] for f in folders]
            Path(args[-1]).write_text(json.dumps({"systems": [{"name": n} for n in names], "comparisons": [
                {"base": names[0], "system": n, "metric": m, "delta": 1.0, "p_bootstrap": 0.001,
                 "p_ar": 0.01 if m in ("bleu", "chrf") else None}
                for n in names[1:] for m in ("bleu", "chrf", "rouge1", "rouge2", "rougeL")]}))
            return True
        where = Path(values["results_dir"]) / "run" / "setting"
        where.mkdir(parents=True, exist_ok=True)
        row = {"hypothesis": values["decoding"], "reference": "r"}
        if values.get("decoding.constraint_words"):  # the words it had to contain: here, the plain output's
            row["constraints"] = [values["decoding"]]
        (where / "hypotheses.jsonl").write_text(json.dumps(row) + "\n")
        bleu = 20.0 + float(values.get("decoding.length_penalty", 1.0))
        self.marks.append(mark := 100 + len(self.marks))
        shown = {m: mark for m in ("hyp_logprob_per_seq", "self_bleu", "rouge1", "constraints_met")}
        (where / "metrics.json").write_text(json.dumps({
            "status": "ok", "label": values["decoding"], "decoding": {"method": values["decoding"]},
            "metrics": {"bleu": bleu, "bleu_ci": [bleu - 1, bleu + 1], **shown}, "settings": {"precision": "fp32"},
            "engine": "seqlab", "checkpoint": {"step": 2}}))
        return True

    def stages(self) -> list[str]:
        """What ran: train, compare, or an evaluation's decoding preset."""
        return [c[0] if c[0] != "evaluate" else dict(a.split("=", 1) for a in c[1:] if "=" in a)["decoding"]
                for c in self.calls]


def toy(beam: tuple[str, ...] = (), name: str = "toy", compare: bool = False) -> Pipeline:
    tests = (compared("vs_greedy", "greedy", ("beam",)),) if compare else ()
    return Pipeline(name, "a toy", (Stage("train", "train", TRAIN),
                                    Stage("greedy", "evaluate", ("decoding=greedy", *EVAL), after="train"),
                                    Stage("beam", "evaluate", ("decoding=beam", *EVAL, *beam), after="train"),
                                    *tests),
                    (Table("toy", decodings_table(("bleu",)), "doc.md"),))


@pytest.fixture
def places(tmp_path, monkeypatch):
    monkeypatch.setattr(seqlab.pipeline.core, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(seqlab.app.runner, "OUTPUTS", tmp_path / "outputs")
    return tmp_path


@pytest.mark.slow
def test_every_experiment_resolves_to_fixed_stages():
    for pipeline in PIPELINES.values():
        planned = plan(pipeline)
        assert [p.stage.name for p in planned] == [s.name for s in pipeline.stages]
        digests = [p.digest for p in planned if p.digest is not None]
        assert len(set(digests)) == len(digests)


def test_the_archived_reference_model_is_still_current():
    """A config key added since its runs (say a loader setting) must not change their digests: the archived
    training and decodings would otherwise all run again."""
    assert all(p.archived for p in plan(PIPELINES["mt_bible_small"]))


@pytest.mark.slow  # plans every pipeline's stages (~1 min); the reference model's are checked by default above
def test_every_archived_record_is_still_current():
    """A config field added since any archived run (a model variant, a loader setting, a prompt key) must leave
    that run's digest as it was: each record in results/ still names the digest its stage plans now (a new key
    is left out at its default by construction: app.runner.without_new_defaults)."""
    stale = []
    for name, pipeline in PIPELINES.items():
        for planned in plan(pipeline):
            path = seqlab.app.runner.record_path(pipeline, planned.stage)
            if planned.stage.command == "bench" or not path.is_file():
                continue
            record = json.loads(path.read_text())
            if record.get("status") in ("ok", "diverged") and not planned.archived:
                stale.append(f"{name}/{planned.stage.name}: archived {record.get('digest')}, planned {planned.digest}")
    assert not stale, stale[:10]


def test_nothing_changed_reruns_nothing_and_a_changed_decoding_only_its_evaluation(places):
    fake = FakeSeqlab()
    assert execute(toy(), command=fake) == [] and fake.stages() == ["train", "greedy", "beam"]
    record = json.loads((places / "results" / "toy" / "beam.json").read_text())
    assert record["result"]["metrics"]["bleu"] == 21.0 and record["manifest"]["commit"]
    assert {"cpu", "cpu_flags", "torch", "precision", "engine", "wall_s", "clean", "date", "command"} <= set(
        record["manifest"])
    trained = json.loads((places / "results" / "toy" / "train.json").read_text())
    assert trained["result"]["val_curve"][-1][0] == 1 and trained["manifest"]["updates"] == 2  # its last.ckpt's
    # every decoding keeps its outputs, one line per test sentence, and names them
    assert record["result"]["outputs"] == {"hypotheses": "beam.hyps.txt.gz", "references": ["test.references.txt.gz"]}
    archive = places / "results" / "toy"
    assert read_lines_gz(archive / "beam.hyps.txt.gz") == ["beam"]
    assert read_lines_gz(archive / "greedy.hyps.txt.gz") == ["greedy"]
    assert read_lines_gz(archive / "test.references.txt.gz") == ["r"]
    fake.calls.clear()
    assert execute(toy(), command=fake) == [] and fake.calls == []
    assert execute(toy(("decoding.length_penalty=0.6",)), command=fake) == [] and fake.stages() == ["beam"]
    fake.calls.clear()
    import shutil
    shutil.rmtree(places / "outputs")  # a fresh machine: the checkpoint is gone, so the training runs again
    assert execute(toy(("decoding.length_penalty=0.8",)), command=fake) == [] and fake.stages() == ["train", "beam"]


def test_experiments_that_share_a_stage_run_it_once_and_a_comparison_reads_its_evaluations(places):
    fake = FakeSeqlab()
    assert execute(toy(), command=fake) == [] and fake.stages() == ["train", "greedy", "beam"]
    fake.calls.clear()
    # another experiment on the same training and decodings: records copied, only the comparison runs
    assert execute(toy(name="other", compare=True), command=fake) == [] and fake.stages() == ["compare"]
    other = places / "results" / "other"
    assert sorted(p.name for p in other.glob("*.json")) == ["beam.json", "greedy.json", "train.json", "vs_greedy.json"]
    assert json.loads((other / "vs_greedy.json").read_text())["result"]["comparisons"][0]["system"] == "beam"
    fake.calls.clear()  # a third names the same beam search otherwise: its record carries its own name
    renamed = Pipeline("third", "", (*toy().stages[:2], replace(toy().stages[2], name="beam5")))
    assert execute(renamed, command=fake) == [] and fake.calls == []
    third = json.loads((places / "results" / "third" / "beam5.json").read_text())
    assert third["stage"] == "beam5" and third["result"]["outputs"]["hypotheses"] == "beam5.hyps.txt.gz"
    assert (places / "results" / "third" / "beam5.hyps.txt.gz").is_file()
    fake.calls.clear()
    import shutil
    shutil.rmtree(places / "outputs")  # a fresh machine: nothing to rerun while the archive is current ...
    assert execute(toy(name="other", compare=True), command=fake) == [] and fake.calls == []
    # ... but a changed decoding reruns its evaluation, the comparison, and the training they read
    assert execute(toy(("decoding.length_penalty=0.6",), name="other", compare=True), command=fake) == []
    assert fake.stages() == ["train", "greedy", "beam", "compare"]


def test_a_comparison_needs_evaluations():
    with pytest.raises(ValueError, match="needs two or more evaluations"):
        Pipeline("c", "", (Stage("train", "train", TRAIN), compared("vs", "train", ("train",))))
    with pytest.raises(ValueError, match="needs two or more evaluations"):  # an archived baseline and nothing
        Pipeline("c", "", (Stage("vs", "compare", baseline="mt_bible_small/greedy"),))
    with pytest.raises(ValueError, match="reads beam, which is not an earlier stage"):
        Pipeline("c", "", (Stage("train", "train", TRAIN),
                           Stage("greedy", "evaluate", ("decoding=greedy", *EVAL), after="train"),
                           compared("vs", "greedy", ("beam",))))


def test_a_failed_stage_is_never_marked_done_and_its_followers_wait(places):
    fake = FakeSeqlab(fail="experiment=smoke")
    assert execute(toy(), command=fake) == ["train", "greedy", "beam"]
    assert not (places / "results" / "toy").exists()


def test_a_bench_that_shared_its_machine_is_not_archived(places):
    bench = Pipeline("b", "", (Stage("train", "train", TRAIN), Stage("bench", "bench", (), after="train")))
    assert execute(bench, command=FakeSeqlab(busy=1.9)) == ["bench"]
    assert not list((places / "results" / "b").glob("bench*.json"))  # the training's record alone
    assert execute(bench, command=FakeSeqlab(busy=0.05)) == []
    assert len(list((places / "results" / "b").glob("bench*.json"))) == 1


def test_a_cpu_without_avx512_is_its_own_bench_kind_under_the_same_model_name(monkeypatch):
    """One reported model name covers CPUs whose bf16 products differ ~100x: their bench records stay apart,
    and a CPU with AVX512 keeps the kind (and the digests) its records were archived under."""
    import seqlab.app.runner as runner

    bench = Stage("bench", "bench", ())
    monkeypatch.setattr(runner, "cpu_model", lambda: "AMD EPYC")
    monkeypatch.setattr(runner, "cpu_flags", lambda: {"avx2", "avx512f", "avx512_bf16"})
    assert runner.machine_kind(bench) == "amd-epyc"
    monkeypatch.setattr(runner, "cpu_flags", lambda: {"avx2", "fma"})
    assert runner.machine_kind(bench) == "amd-epyc-no-avx512"


def test_stages_that_would_differ_between_machines_are_refused():
    timed = Pipeline("t", "", (Stage("train", "train", ("experiment=mt_bible_small",)),))  # 25 minutes
    with pytest.raises(PipelineError, match=r"trainer.max_time=null \(now 00:00:25:00\)"):
        plan(timed)
    probed = Pipeline("p", "", (Stage("train", "train", (*TRAIN[:-1], "trainer.precision=auto")),))
    with pytest.raises(PipelineError, match="trainer.precision=auto"):
        plan(probed)


def test_tables_render_between_markers_and_a_hand_edit_is_caught(places):
    pipeline = toy()
    execute(pipeline, command=FakeSeqlab())
    doc = places / "doc.md"
    doc.write_text("# Toy\n\n<!-- table:toy -->\nold\n<!-- /table:toy -->\n\nprose\n")
    assert render([pipeline], root=places) == ["doc.md: table toy"]
    text = doc.read_text()
    assert "| greedy | 21.00 [20.00, 22.00] |" in text and text.endswith("<!-- /table:toy -->\n\nprose\n")
    assert render([pipeline], check=True, root=places) == []
    doc.write_text(text.replace("21.00 [20.00", "21.50 [20.00"))
    assert render([pipeline], check=True, root=places) == ["doc.md: table toy"]


@pytest.mark.slow
def test_every_generated_table_in_the_docs_is_current():
    assert render(list(PIPELINES.values()), check=True) == []


@pytest.mark.parametrize("name", [*(pytest.param(n, marks=pytest.mark.slow) for n in ("decoding_sweep", "beam_curse")),
                                  "truncation", "mbr", "no_repeat", "constraints"])  # (the two costliest: slow)
def test_each_decoding_experiment_runs_its_stages_and_renders_every_row(places, name):
    pipeline = PIPELINES[name]
    fake = FakeSeqlab()
    assert execute(pipeline, command=fake) == []
    evaluations = [s for s in pipeline.stages if s.command == "evaluate"]
    assert fake.stages().count("train") == len({s.after for s in evaluations})  # one training per model
    assert fake.stages().count("compare") == sum(s.command == "compare" for s in pipeline.stages)
    text = "\n".join(t.render(places / "results" / name) for t in pipeline.tables)
    assert "No archived run" not in text and "results/" + name in text
    assert len(fake.marks) == len(evaluations)
    assert [m for m in fake.marks if f"{m}.0" not in text] == []  # every decoding is in a table
    compared_stages = {c for s in pipeline.stages if s.command == "compare" for c in s.compares[1:]}
    assert text.count("+1.00 (p 0.001") >= min(len(compared_stages), 1)  # the paired tests are shown
    if name == "constraints":  # the share of constraint words the unconstrained output has, from the archive
        assert "| unordered1 | 100.0 | 1" in text and read_lines_gz(places / "results" / name /
                                                                 "unordered2.constraints.txt.gz") == ["beam"]


# The trained study keeps every run's hypotheses (greedy and beam 5, about 83 KiB a run): 3 seeds of about 20
# variants come to about 6 MiB, where every other archive stays under 5
ARCHIVE_MIB = {"arch_study_trained": 9}


def test_every_archived_record_names_a_commit_and_the_archives_stay_small():
    results = ROOT / "results"
    for folder in sorted(p for p in results.iterdir() if p.is_dir()):
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        most = ARCHIVE_MIB.get(folder.name, 5)
        assert size <= most * 2**20, f"{folder}: {size / 2**20:.1f} MiB; this archive holds at most {most} MiB"
        for path in sorted(folder.glob("*.json")):  # every record in the one format: a stage's
            record = json.loads(path.read_text())
            assert isinstance(record, dict) and {"stage", "status", "digest", "result", "manifest"} <= set(record), path
            # <stage>.json, or <stage>-<machine>.json for a bench
            assert path.stem == record["stage"] or path.stem.startswith(record["stage"] + "-"), path
            assert re.fullmatch(r"[0-9a-f]{40}", record["manifest"].get("commit") or ""), path
    total = sum(f.stat().st_size for f in results.rglob("*") if f.is_file())
    assert total <= 30 * 2**20


# reads every archive (a minute): with the slow tests; the docs' tables are checked by make check-docs
@pytest.mark.slow
def test_a_reader_recomputes_every_archived_bleu_from_the_archive_alone():
    """Every archived decoding that keeps its outputs (its record's `outputs`: the studies' and the
    pipelines') gives its recorded BLEU back through sacreBLEU over the archived files."""
    from sacrebleu.metrics import BLEU

    checked, by_references = 0, {}  # sacreBLEU's reference cache, one per set of references (most share one)
    for record_path in sorted((ROOT / "results").glob("*/*.json")):
        record = json.loads(record_path.read_text())
        if not isinstance(record, dict):
            continue
        archive = record_path.parent
        if "outputs" not in record.get("result", {}):  # not a decoding
            continue
        files, metrics = record["result"]["outputs"], record["result"]["metrics"]
        hyps, refs = archive / files["hypotheses"], [archive / r for r in files["references"]]
        streams = tuple(tuple(read_lines_gz(r)) for r in refs)
        if streams not in by_references:
            by_references[streams] = BLEU(references=[list(r) for r in streams])
        score = by_references[streams].corpus_score(read_lines_gz(hyps), None).score
        assert score == pytest.approx(metrics["bleu"], abs=1e-9), record_path
        checked += 1
    assert checked >= 80  # the two studies' decodings today; the pipelines' as they are decoded again


def test_each_record_is_committed_as_it_lands(places, monkeypatch):
    import subprocess

    for key in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(key, "t@t")
    subprocess.run(["git", "init", "-q", str(places)], check=True)
    subprocess.run(["git", "-C", str(places), "commit", "-q", "--allow-empty", "-m", "start"], check=True)
    (places / "unrelated.txt").write_text("work in progress")  # never swept into a record's commit
    assert execute(toy(), command=FakeSeqlab(), commit=True) == []
    log = subprocess.run(["git", "-C", str(places), "log", "--format=%s"], capture_output=True, text=True).stdout
    assert log.split("\n")[:3] == ["toy: beam", "toy: greedy", "toy: train"]
    tracked = subprocess.run(["git", "-C", str(places), "ls-files"], capture_output=True, text=True).stdout.split()
    assert tracked == ["results/toy/beam.hyps.txt.gz", "results/toy/beam.json", "results/toy/greedy.hyps.txt.gz",
                       "results/toy/greedy.json", "results/toy/test.references.txt.gz", "results/toy/train.json"]
    from seqlab.pipeline.commands import commit_archive

    monkeypatch.chdir(places)  # `--results` left at its default: the archive named relative to the checkout
    (places / "results" / "toy" / "bench-cpu.json").write_text("{}")
    commit_archive(Path("results/toy"), "toy: bench")
    log = subprocess.run(["git", "-C", str(places), "log", "--format=%s"], capture_output=True, text=True).stdout
    assert log.startswith("toy: bench\n")


def test_a_stage_named_for_rerun_runs_again_and_an_unknown_name_is_refused(places):
    fake = FakeSeqlab()
    execute(toy(), command=fake)
    fake.calls.clear()
    assert execute(toy(), command=fake, rerun=frozenset({"beam"})) == [] and fake.stages() == ["beam"]
    with pytest.raises(PipelineError, match=r"--rerun 'bem': no such stage of toy"):
        execute(toy(), command=fake, rerun=frozenset({"bem"}))


def test_a_digest_names_no_place_on_this_machine():
    """Paths (the checkout, its caches and outputs) stay out of what a digest covers, at any depth, so a
    worktree's run and the checkout's agree on what is archived."""
    from seqlab.app.runner import resolved_config

    for name in ("mt_bible_small", "bench"):
        for stage in PIPELINES[name].stages:
            assert str(ROOT) not in json.dumps(resolved_config(stage), default=str), (name, stage.name)


def test_a_gpu_profile_is_summarized_from_torch_profilers_table():
    from pipelines.bench_gpu import kernel_name, profile_summary

    record = json.loads(Path("results/bench_gpu/base-nvidia-h200.json").read_text())
    text = record["result"]["profiles"]["train_bf16_seqlab"]
    host, device, ops = profile_summary(text)
    assert f"Self CPU time total: {host:.3f}ms" in text and f"Self CUDA time total: {device:.3f}ms" in text
    assert len(ops) == 5 and ops == sorted(ops, key=lambda op: -op[1])  # the table is sorted by GPU self time
    assert kernel_name("void at::native::reduce_kernel<128, 4, at::nati...") == "at::native::reduce_kernel"
    cpu_only = "  Name  Self CPU %  Self CPU\n  aten::mm  50.00%  1.000ms\nSelf CPU time total: 2.000ms\n"
    host, device, ops = profile_summary(cpu_only)
    assert host == 2.0 and device != device and ops == [("aten::mm", 50.0)]  # nan: no GPU
    seconds = cpu_only.replace("2.000ms", "1.070s")  # the profiler writes a total of a second or more in s
    assert profile_summary(seconds)[0] == 1070.0


def test_a_copy_of_the_tree_without_git_names_its_commit_from_the_environment(tmp_path, monkeypatch):
    """A GPU machine gets the files without .git, or with a stale one: SEQLAB_COMMIT says which commit they are."""
    from seqlab.provenance import git_state

    monkeypatch.delenv("SEQLAB_COMMIT", raising=False)
    assert git_state(tmp_path) == (None, False)
    monkeypatch.setenv("SEQLAB_COMMIT", "747d13bd7a")
    assert git_state(tmp_path) == ("747d13bd7a", True)
    assert git_state() == ("747d13bd7a", True)  # over a .git the copy carries, which may be older than its files
    monkeypatch.delenv("SEQLAB_COMMIT")
    assert git_state()[0] != "747d13bd7a"


def write_side_bench(archive: Path, stage: str, result: dict, config: dict) -> None:
    """A side bench's record as the runner archives it on a quiet AMD EPYC: `result` with its config, 2 threads,
    other processes' load 0.01 cores, and the machine's manifest."""
    record = {"stage": stage, "status": "ok", "digest": "d",
              "result": {**result, "config": config, "threads": 2, "others_busy_cores": 0.01},
              "manifest": {"cpu": "AMD EPYC", "cpu_flags": ["avx2"], "torch": "2.13.0", "commit": "0123456789abc",
                           "date": "2026-12-06T12:00:00Z"}}
    (archive / f"{stage}-amd-epyc.json").write_text(json.dumps(record))


def test_the_layer_split_speed_table_reads_a_checkpoints_bench_record(tmp_path):
    """The layer split's speed: each timed checkpoint under its label, tokens/s and the speed against 3+3."""
    from pipelines.arch_study_trained import LAYER_SPLIT_SPEED, layer_split_speed

    rows = []
    for k, path in enumerate(LAYER_SPLIT_SPEED.values()):
        for decoding, first in (("greedy", 10.0), ("beam5", 40.0)):
            rows.append({"checkpoint": path, "run": "x", "decoding": decoding, "sources": 500, "tokens": 12_000,
                         "seconds": first / (1 + k), "first_seconds": first})
    write_side_bench(tmp_path, "layer_split_speed", {"checkpoints": rows}, {"decode_repeats": 3})
    text = layer_split_speed(tmp_path)
    assert layer_split_speed(tmp_path / "empty").startswith("_Not yet timed")
    assert "| 3+3 (the reference model) | 1,200 (1.00x) | 300 (1.00x) |" in text
    assert "| 1+5 (enc1_dec5, seed 0) | 3,600 (3.00x) | 900 (3.00x) |" in text
    assert "500 sentences" in text and "**AMD EPYC**" in text


def test_the_architecture_speed_table_sets_each_architecture_against_the_encoder_decoder(tmp_path):
    """Per source length, each architecture's tokens/s and its speed against the encoder-decoder on the same
    sources, greedy and beam; no record yet: the command that makes one."""
    from pipelines.arch_study_trained import architecture_speed

    assert "--only architecture_speed" in architecture_speed(tmp_path)
    seconds = {"encoder_decoder": 1.0, "decoder_only": 2.0, "prefix_lm": 4.0}
    rows = [{"architecture": a, "decoding": d, "source_tokens": n, "sources": 64, "tokens": 2_560,
             "seconds": s * (2 if d == "beam5" else 1) * n / 40} for n in (20, 40) for d in ("greedy", "beam5")
            for a, s in seconds.items()]
    write_side_bench(tmp_path, "architecture_speed", {"architectures_decoding": rows},
                     {"decode_sources": 64, "max_new_tokens": 40, "decode_repeats": 3})
    text = architecture_speed(tmp_path)
    assert "| 20 | encoder-decoder (3+3) | 5,120 (1.00x) | 2,560 (1.00x) |" in text
    assert "| 40 | prefix LM (6) | 640 (0.25x) | 320 (0.25x) |" in text
    assert "every output 40 tokens" in text and "**AMD EPYC**" in text


def test_the_families_table_says_what_engine_auto_takes_where_the_record_asked(tmp_path):
    """A families record: its rows against generate and CTranslate2, both engines; and the engine `engine=auto`
    takes for a batch and for one source a call, where the record holds it (older records do not)."""
    from pipelines.bench_families import render

    config = {"decode_sources": 64, "seq_len": 32, "max_new_tokens": 64, "decode_repeats": 3}
    row = {"shape": "t5-small", "decoding": "greedy", "sources": 16, "tokens": 1_000, "seqlab_s": 2.0, "hf_s": 4.0,
           "ct2_s": 1.0, "equal_hf": 16, "equal_ct2": 16, "onednn_s": 1.0, "equal_onednn": 16, "one_at_a_time": True}
    write_side_bench(tmp_path, "families", {"families": [row]}, config)
    assert "| t5-small | greedy, one source a call | 500 | 2.00x | 0.50x | 16 of 16 | 16 of 16 | 1.00x |" in \
        render(tmp_path) and "engine=auto" not in render(tmp_path)
    reason = "oneDNN's packed products {}x MKL's at {} (probe of 2026-12-06); oneDNN is taken at 1.5x or more"
    auto = {"many sources a call": {"engine": "seqlab", "reason": reason.format("1.44", "decoding shapes")},
            "one source a call, greedy": {"engine": "seqlab_onednn",
                                          "reason": reason.format("3.10", "one source a call in 1 row")}}
    write_side_bench(tmp_path, "families", {"families": [row], "engine_auto": auto}, config)
    assert ("`engine=auto` on this CPU takes, many sources a call: `seqlab` (oneDNN's packed products 1.44x MKL's "
            "at decoding shapes); one source a call, greedy: `seqlab_onednn` (oneDNN's packed products 3.10x MKL's "
            "at one source a call in 1 row).") in render(tmp_path)


def test_the_one_source_table_sets_the_compiled_step_against_the_eager_one_and_ctranslate2(tmp_path):
    """A one-source record: the compiled engine's tokens/s, its speed against the eager step and CTranslate2,
    the eager step's against CTranslate2, the first pass, and outputs compared; without CTranslate2, dashes."""
    from pipelines.bench_one_source import render

    assert "make pipeline NAME=" in render(tmp_path)
    config = {"decode_sources": 64, "seq_len": 40, "max_new_tokens": 40, "decode_repeats": 3}
    row = {"shape": "gpt2", "decoding": "greedy", "sources": 16, "tokens": 640, "seqlab_s": 4.0, "compiled_s": 2.0,
           "first_pass_s": 61.4, "ct2_s": 3.0, "equal_compiled": 16, "equal_ct2": 15}
    write_side_bench(tmp_path, "one_source", {"one_source": [row, {**row, "ct2_s": None, "equal_ct2": None}]},
                     config)
    text = render(tmp_path)
    assert "| gpt2 | greedy | 320 | 2.00x | 1.50x | 0.75x | 61 s | 16 of 16 | 15 of 16 |" in text
    assert "| gpt2 | greedy | 320 | 2.00x | – | – | 61 s | 16 of 16 | – |" in text
    assert "16 random sources of 20-40 tokens one a call, 40 new tokens at most, fp32, best of 3" in text


def test_the_int8_table_sets_seqlab_int8_against_ctranslate2_int8_and_both_against_fp32(tmp_path):
    """An int8 record: seqlab int8's tokens/s and its speed against CTranslate2 int8, eager and compiled, one
    source a call named, each toolkit's outputs against seqlab fp32's, the compiled engine's against the eager
    one's; without CTranslate2, or in a record from before the compiled engine, dashes."""
    from pipelines.bench_int8 import render

    assert "make pipeline NAME=" in render(tmp_path)
    config = {"decode_sources": 64, "seq_len": 40, "max_new_tokens": 40, "decode_repeats": 3}
    row = {"shape": "opus-mt", "decoding": "beam5", "sources": 64, "one_at_a_time": False, "tokens": 2_560,
           "seqlab_s": 2.0, "ct2_s": 2.5, "equal_fp32": 60, "ct2_equal_fp32": 58, "compiled_s": 1.25,
           "first_pass_s": 21.4, "equal_compiled": 63, "compiled_equal_fp32": 59}
    single = {**row, "sources": 16, "one_at_a_time": True, "tokens": 640, "ct2_s": None, "equal_fp32": 16,
              "ct2_equal_fp32": None, "equal_compiled": 16, "compiled_equal_fp32": 16}
    old = {k: v for k, v in row.items() if k not in ("compiled_s", "first_pass_s", "equal_compiled",
                                                      "compiled_equal_fp32")}
    write_side_bench(tmp_path, "int8", {"int8": [row, single, {**old, "shape": "t5-small"}]}, config)
    text = render(tmp_path)
    assert "| opus-mt | beam5 | 1,280 | 1.25x | 2.00x | 21 s | 63 of 64 | 60 of 64 | 59 of 64 | 58 of 64 |" in text
    assert "| opus-mt | beam5, one source a call | 320 | – | – | 21 s | 16 of 16 | 16 of 16 | 16 of 16 | – |" in text
    assert "| t5-small | beam5 | 1,280 | 1.25x | – | – | – | 60 of 64 | – | 58 of 64 |" in text
    assert "64 random sources of 20-40 tokens, 40 new tokens at most, best of 3" in text


def test_the_finetune_table_says_how_each_pair_of_rows_was_timed(tmp_path):
    """A fine-tuning record: seqlab against HF from the median of alternating steps, or from the fastest of runs
    in turn with the median runs' ratio beside it, each side's spread; a record without the runs (older ones)
    names its rounds, a skipped mode says why."""
    from pipelines.bench_finetune import render

    assert "make pipeline NAME=" in render(tmp_path)
    config = {"batch": 4, "seq_len": 32, "train_steps": 2, "warmup_steps": 1}
    mine = {"shape": "nllb-1.3b", "mode": "lora", "side": "seqlab", "parameters": 1_000, "trainable": 10,
            "tokens_per_s": 40.0, "step_s": 6.4, "peak_mb": 100.0, "skipped": None, "runs_s": [8.0, 6.4, 7.0],
            "timing": "turns"}
    theirs = {**mine, "side": "hf", "trainable": 12, "tokens_per_s": 32.0, "step_s": 8.0, "peak_mb": 120.0,
              "runs_s": [8.0, 8.4, 8.8]}
    paired = [{**r, "mode": "lora + checkpointing", "timing": "paired"} for r in (mine, theirs)]
    old = [{k: v for k, v in r.items() if k not in ("runs_s", "timing")} | {"mode": "full"} for r in (mine, theirs)]
    skipped = [{**r, "shape": "x", "tokens_per_s": None, "step_s": None, "peak_mb": None, "skipped": "no room",
                "runs_s": None} for r in (mine, theirs)]
    write_side_bench(tmp_path, "finetune", {"finetune": [mine, theirs, *paired, *old, *skipped], "rounds": 3},
                     config)
    text = render(tmp_path)
    assert ("| nllb-1.3b | lora | 1,000 | 10 | 12 | 100 | 120 | 40 | 32 | 1.25x | fastest of 3 runs in turn "
            "(median runs 1.20x; slowest/fastest: seqlab 1.25; HF 1.10) |") in text
    assert ("| nllb-1.3b | lora + checkpointing | 1,000 | 10 | 12 | 100 | 120 | 40 | 32 | 1.25x | median of 3 "
            "alternating steps; seqlab's the faster of a pair in 2 of 3 (1.00x-1.31x) |") in text
    assert "| nllb-1.3b | full | 1,000 | 10 | 12 | 100 | 120 | 40 | 32 | 1.25x | fastest of 3 runs in turn |" in text
    assert "| x | lora | 1,000 | - | - | - | - | - | - | not run: no room | - |" in text
    assert "1 warm-up step(s) a run; a run alone: 2 timed steps" in text


def test_the_reference_models_speculative_table_names_generates_rows_apart(tmp_path):
    """A reference model's speculative record: seqlab's settings by name, generate's one source a call under its
    own name (its "greedy" is not seqlab's), each against its own greedy search."""
    from pipelines.bench_speculative import render

    assert render(tmp_path).startswith("_No archived speculative bench yet")
    row = {"setting": "greedy", "draft": "none", "sources": 10, "tokens": 1_000, "seconds": 2.0, "greedy_seconds": 2.0,
           "equal": 10}
    rows = [row, {**row, "setting": "greedy_lookup5", "draft": "lookup", "seconds": 1.0, "acceptance": 0.5,
                  "tokens_per_call": 2.0, "draft_seconds": 0.1},
            {**row, "seconds": 8.0, "greedy_seconds": 8.0, "model": "hf generate", "batch": 1},
            {**row, "setting": "greedy_lookup5", "draft": "lookup", "seconds": 4.0, "greedy_seconds": 8.0,
             "model": "hf generate", "batch": 1}]
    write_side_bench(tmp_path, "speculative_sum", {"speculative": rows}, {"decode_repeats": 3})
    text = render(tmp_path)
    assert "| greedy_lookup5 | 1,000 | 2.00x | 10 / 10 | 50.0% | 2.00 | 0.10 |" in text
    assert "| hf generate: greedy, one source a call | 125 | 1.00x | 10 / 10 | - | - | - |" in text
    assert "| hf generate: greedy_lookup5, one source a call | 250 | 2.00x |" in text


def test_a_checkout_is_clean_whatever_the_pipelines_wrote(tmp_path, monkeypatch):
    """A rendered doc or an archive changed by one experiment's run leaves the code clean for the next record; a
    changed source file does not."""
    import subprocess

    from seqlab.provenance import git_state

    monkeypatch.delenv("SEQLAB_COMMIT", raising=False)
    for folder in ("docs", "results", "src"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "a.txt").write_text("one\n")
    (tmp_path / "README.md").write_text("one\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "."], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "x"], cwd=tmp_path, check=True)
    for changed in ("docs/a.txt", "results/a.txt", "README.md"):
        (tmp_path / changed).write_text("two\n")
    assert git_state(tmp_path)[1] is True
    (tmp_path / "src" / "a.txt").write_text("two\n")
    assert git_state(tmp_path)[1] is False


def test_a_decoding_rerun_here_takes_this_machines_training_record_into_the_archive(places):
    """An archived training from another machine (same config, same digest) and a decoding rerun on this
    machine's checkpoint: the archive's training record must describe the model that was decoded."""
    pipeline = toy()
    assert execute(pipeline, FakeSeqlab()) == []
    archived = places / "results" / "toy" / "train.json"
    elsewhere = json.loads(archived.read_text())
    elsewhere["manifest"] = {**elsewhere["manifest"], "cpu": "another CPU", "date": "2026-01-01T00:00:00Z"}
    archived.write_text(json.dumps(elsewhere))
    assert execute(pipeline, fake := FakeSeqlab()) == [] and fake.calls == []  # nothing decoded: left as it is
    assert json.loads(archived.read_text())["manifest"]["cpu"] == "another CPU"
    assert execute(pipeline, fake, rerun=frozenset({"beam"})) == [] and fake.stages() == ["beam"]
    (here,) = (places / "outputs").glob("train-*/record.json")
    assert json.loads(archived.read_text()) == json.loads(here.read_text())


def test_the_distillation_pipeline_trains_its_students_on_the_teachers_outputs(places):
    pipeline = PIPELINES["distillation"]
    fake = FakeSeqlab()
    assert execute(pipeline, command=fake) == []
    (distill,) = [c for c in fake.calls if c[0] == "distill"]
    teacher = next(c for c in fake.calls if c[0] == "train" and "run_name=arch_baseline" in c)
    assert dict(a.split("=", 1) for a in distill[1:])["ckpt"].startswith(
        dict(a.split("=", 1) for a in teacher[1:])["hydra.run.dir"])
    corpus = dict(a.split("=", 1) for a in distill[1:])["out"]
    students = [c for c in fake.calls if c[0] == "train" and "run_name=distilled_enc5_dec1" in c]
    assert len(students) == 3 and all(f"data.corpus.path={corpus}" in c and "data=distilled" in c for c in students)
    teacher_ckpt = dict(a.split("=", 1) for a in distill[1:])["ckpt"]
    assert all(f"train.tokenizer_from={teacher_ckpt}" in c for c in students)
    archive = places / "results" / "distillation"
    assert read_lines_gz(archive / "distill.train_targets.txt.gz") == ["t"]
    text = pipeline.tables[0].render(archive)
    assert text.count("5+1, distilled") == 3 and "+1.00 (p 0.001" in text


def test_a_training_record_holds_the_mean_training_loss_of_each_validation_interval(tmp_path):
    """`train_curve`: beside each validation loss, the mean of the training losses logged since the one before
    (Lightning's CSV rows: a training row per logged step, a validation row per validation)."""
    from seqlab.pipeline.training import training_result

    rows = ["epoch,step,train/loss,val/loss", "0,9,4.0,", "0,19,3.0,", "0,19,,3.5", "0,29,2.0,", "0,39,1.0,",
            "0,39,,2.5", "0,49,,2.4"]
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "metrics.csv").write_text("\n".join(rows) + "\n")
    _, result = training_result(tmp_path)
    assert result["val_curve"] == [(20, 3.5), (40, 2.5), (50, 2.4)]
    assert result["train_curve"] == [(20, 3.5), (40, 1.5)]  # nothing logged after update 40: no point at 50


def test_the_lm_workflow_exports_imports_fine_tunes_and_tests_against_the_archived_reference(places):
    """The trained LM goes out as a Hugging Face folder and comes back through `seqlab import`; the imported
    checkpoint is what the prompted evaluations decode and what the fine-tuning starts from; the comparison's
    baseline is the 3 + 3's archived greedy record, read from results/, and keys the comparison's digest."""
    pipeline = PIPELINES["lm_workflow"]
    reference = places / "results" / "mt_bible_small"
    with pytest.raises(PipelineError, match="mt_bible_small/greedy has no archived evaluation"):
        plan(pipeline)
    reference.mkdir(parents=True)
    atomic_write_lines_gz(reference / "greedy.hyps.txt.gz", ["h"])
    atomic_write_lines_gz(reference / "test.references.txt.gz", ["r"])
    record = {"stage": "greedy", "status": "ok", "digest": "d1", "result": {"outputs": {
        "hypotheses": "greedy.hyps.txt.gz", "references": ["test.references.txt.gz"]}}}
    (reference / "greedy.json").write_text(json.dumps(record))
    fake = FakeSeqlab()
    assert execute(pipeline, command=fake) == []
    assert [c[0] for c in fake.calls] == ["train", "evaluate", "export", "import", "evaluate", "evaluate", "train",
                                          "evaluate", "compare", "compare"]
    export, imported = fake.calls[2], fake.calls[3]
    assert export[export.index("--out") + 1] == imported[imported.index("--hf") + 1]  # the user's import path
    ckpt = imported[imported.index("--out") + 1]
    assert [dict(a.split("=", 1) for a in c[1:] if "=" in a)["ckpt"] for c in fake.calls[4:6]] == [ckpt, ckpt]
    assert f"train.init_from={ckpt}" in fake.calls[6] and "prompt.chat=true" in fake.calls[6]
    assert fake.calls[8][1] == str(reference / "greedy.json")  # the baseline first, from the archive
    archive = places / "results" / "lm_workflow"
    assert json.loads((archive / "hf.json").read_text())["result"]["family"] == "llama"
    text = pipeline.tables[0].render(archive)
    assert text.count("| imported folder") == 3 and "+1.00 (p 0.001 / 0.01) *" in text
    assert "outputs on 1 of 1 test sentences" in text  # the fake writes its preset: the same greedy output
    first = {p.stage.name: p.digest for p in plan(pipeline)}
    (reference / "greedy.json").write_text(json.dumps({**record, "digest": "d2"}))  # the reference rerun
    again = {p.stage.name: p.digest for p in plan(pipeline)}
    assert [n for n in first if first[n] != again[n]] == ["vs_reference"]


def test_on_a_gpu_an_experiment_is_a_copy_with_its_own_digests_archive_and_named_device(places, monkeypatch):
    """`--device cuda`: every training and decoding on the GPU (in its config, so in its digest), archived in
    results/<name>-gpu/ with the GPU named in each record; the trainings that read nothing run side by side
    (`--parallel`), before what reads them; the CPU archive is left as it was."""
    from seqlab.pipeline.devices import on_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
    cpu = Pipeline("toy", "a toy", (Stage("train", "train", TRAIN), Stage("other", "train", (*TRAIN, "seed=1")),
                                    Stage("greedy", "evaluate", ("decoding=greedy", *EVAL), after="train"),
                                    Stage("speed", "bench", ("bench.decode_sources=0",))), ())
    gpu = on_device(cpu, "cuda")
    assert gpu.name == "toy-gpu" and [s.name for s in gpu.stages] == ["train", "other", "greedy"]  # no bench
    assert "trainer.accelerator=gpu" in gpu.stage("train").overrides and "device=cuda" in gpu.stage("greedy").overrides
    digests = {p.stage.name: p.digest for p in plan(cpu)}
    assert all(p.digest != digests[p.stage.name] for p in plan(gpu))
    fake = FakeSeqlab()
    assert execute(gpu, command=fake, parallel=2) == []
    assert [c[0] for c in fake.calls] == ["train", "train", "evaluate"]
    for name in ("train", "other", "greedy"):
        record = json.loads((places / "results" / "toy-gpu" / f"{name}.json").read_text())
        assert record["manifest"]["device"] == "NVIDIA H100 80GB HBM3"
    assert not (places / "results" / "toy").exists()
    fake.calls.clear()
    assert execute(gpu, command=fake, parallel=2) == [] and fake.calls == []  # landed: nothing runs again
    assert execute(cpu, command=fake, only=frozenset({"gr*"})) == []  # a pattern: the decoding and its training
    assert [c[0] for c in fake.calls] == ["train", "evaluate"]
    assert "device" not in json.loads((places / "results" / "toy" / "train.json").read_text())["manifest"]
    with pytest.raises(ValueError, match="--device tpu: one of cpu, cuda"):
        on_device(cpu, "tpu")


def test_a_failed_parallel_training_is_not_archived_and_its_readers_wait(places):
    fake = FakeSeqlab(fail="seed=1")
    pipeline = Pipeline("toy", "a toy", (Stage("train", "train", TRAIN), Stage("other", "train", (*TRAIN, "seed=1")),
                                         Stage("greedy", "evaluate", ("decoding=greedy", *EVAL), after="other")), ())
    assert sorted(execute(pipeline, command=fake, parallel=2)) == ["greedy", "other"]
    assert (places / "results" / "toy" / "train.json").is_file()
    assert not (places / "results" / "toy" / "other.json").exists()


@pytest.mark.slow
def test_the_distillation_run_on_a_gpu_renders_on_its_page_naming_the_gpu(places, monkeypatch):
    from seqlab.pipeline.devices import on_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    pipeline = PIPELINES["distillation"]
    assert execute(on_device(pipeline, "cuda"), command=FakeSeqlab(), parallel=4) == []
    text = pipeline.tables[0].render(places / "results" / "distillation")
    assert text.startswith("_Trained and decoded on NVIDIA H200 (`results/distillation-gpu/`)")
    assert text.count("5+1, distilled") == 3


def test_a_field_added_at_its_default_leaves_every_archived_digest_as_it_was(tmp_path, monkeypatch):
    """Archive keys are stable by construction: a key the archive's generation did not have (app.frozen_keys)
    is left out of a digest at its default value, with no list to extend; a stage that sets it is re-keyed."""
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(seqlab.app.runner.CONF_DIR, conf)
    for name, added in (("train.yaml", "new_knob: 3\nnew_section: {a: 1, b: [2]}\n"), ("eval.yaml", "new_knob: 3\n"),
                        ("trainer/cpu.yaml", "new_trainer_flag: false\n")):
        with (conf / name).open("a") as f:
            f.write(added)
    pipeline = PIPELINES["mt_bible_small"]
    before = {p.stage.name: (p.digest, p.archived) for p in plan(pipeline)}
    monkeypatch.setattr(seqlab.app.runner, "CONF_DIR", conf)
    after = {p.stage.name: (p.digest, p.archived) for p in plan(pipeline)}
    assert after == before and any(archived for _, archived in after.values())
    train = next(s for s in pipeline.stages if s.command == "train")
    for override in ("new_knob=4", "new_section.a=2", "trainer.new_trainer_flag=true"):
        changed = replace(train, overrides=(*train.overrides, override))
        assert plan(replace(pipeline, stages=(changed,)))[0].digest != before[train.name][0], override


def test_a_training_a_stopped_sitting_left_short_trains_on_before_anything_decodes_it(places):
    """A checkpoint saved before trainer.max_steps (a sitting ended mid-run) is not the training: an evaluation
    that needs it waits while the stage resumes from it, archived or not."""
    pipeline = toy()
    assert execute(pipeline, FakeSeqlab()) == []
    (last,) = (places / "outputs").glob("train-*/checkpoints/last.ckpt")
    torch.save({"seqlab": {}, "state_dict": {}, "global_step": 1}, last)  # 1 of its 2 updates
    fake = FakeSeqlab()
    assert execute(toy(("decoding.length_penalty=0.6",)), fake) == [] and fake.stages() == ["train", "beam"]
    assert f"train.resume={last}" in fake.calls[0]
    torch.save({"seqlab": {}, "state_dict": {}, "global_step": 1}, last)  # another experiment adopts no record
    assert execute(toy(name="other"), fake := FakeSeqlab()) == [] and fake.stages() == ["train"]  # of a short one
