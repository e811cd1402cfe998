"""`make bench` end to end on a tiny model: both toolkits timed on the same batches, outputs compared."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from seqlab.app.configs import plain, typed
from seqlab.bench.result import DECODINGS, BenchResult
from seqlab.bench.run import run_bench
from seqlab.bench.speed import BenchConfig, train_flops
from seqlab.hardware import QUIET_CORES, CpuClock, busy_warning, cores_busy_s

ROOT = Path(__file__).resolve().parents[2]
TINY = BenchConfig(d_model=32, n_heads=2, layers=1, d_ff=64, vocab=64, batch=4, seq_len=8, train_steps=2,
                   warmup_steps=1, train_repeats=2, decode_sources=4, max_new_tokens=5, num_beams=2,
                   decode_repeats=1)


def test_train_flops_count_every_product_of_a_real_training_step():
    """The analytic FLOPs per step equal what PyTorch's FlopCounterMode counts in a forward and backward."""
    from dataclasses import replace

    from torch.utils.flop_counter import FlopCounterMode

    from seqlab.bench.speed import random_batch, seqlab_train_step
    from seqlab.model import Seq2SeqTransformer

    cfg = BenchConfig(d_model=64, n_heads=2, layers=2, d_ff=256, vocab=500, batch=4, seq_len=16)
    model = Seq2SeqTransformer(replace(cfg.model_config(), attention_kernel="math"))
    with FlopCounterMode(display=False) as counter:
        seqlab_train_step(model, 0.1)(random_batch(cfg, torch.Generator().manual_seed(0))).backward()
    assert counter.get_total_flops() == train_flops(model.cfg, cfg.batch, cfg.seq_len, cfg.seq_len)


def test_best_of_alternates_the_runs_and_keeps_each_ones_fastest():
    from seqlab.hardware import best_of

    order: list[str] = []
    times = {"a": iter([3.0, 1.0, 2.0]), "b": iter([1.5, 2.5, 0.5])}

    def run(name: str):
        order.append(name)
        t = next(times[name])
        return f"{name}{t}", t

    best = best_of({"a": lambda: run("a"), "b": lambda: run("b")}, repeats=3)
    assert order == ["a", "b"] * 3  # a slow spell hits both sides alike
    assert best == {"a": ("a1.0", 1.0), "b": ("b0.5", 0.5)}  # each side's fastest run, and its output


def performance_page(r: BenchResult, tmp_path: Path) -> str:
    """The performance page's table for this result, archived as the bench pipeline archives it."""
    from pipelines.bench import headline, performance
    from seqlab.provenance import capture

    record = {"stage": "bench", "status": "ok", "result": r.to_dict(),
              "manifest": capture("seqlab bench", "", None, 1.0).to_dict()}
    (tmp_path / "bench-this-cpu.json").write_text(json.dumps(record))
    assert headline(tmp_path).count("\n") == 2  # the README's summary: one row for the one CPU
    return performance(tmp_path)


def test_other_processes_load_is_the_busy_time_of_this_processs_cores_less_its_own(tmp_path):
    stat = tmp_path / "stat"  # /proc/stat's layout: user nice system idle iowait irq softirq steal guest ...
    stat.write_text("cpu  1000 60 150 9000 400 30 20 50 0 0\n"
                    "cpu0 350 25 75 4500 200 15 10 25 0 0\ncpu1 650 35 75 4500 200 15 10 25 0 0\nintr 5\n")
    tick = os.sysconf("SC_CLK_TCK")
    assert cores_busy_s(str(stat), {0}) == pytest.approx(500 / tick)  # idle and iowait left out
    assert cores_busy_s(str(stat), {0, 1}) == pytest.approx((500 + 810) / tick)
    assert cores_busy_s(str(tmp_path / "none"), {0}) is None and cores_busy_s(str(stat), {7}) is None
    before = CpuClock(busy_s=100.0, own_s=10.0, wall_s=50.0)
    # 2 s of wall time: the cores were busy 5 CPU-seconds, 3 of them this process's -> 1 core elsewhere
    assert before.others_busy_cores(CpuClock(105.0, 13.0, 52.0)) == pytest.approx(1.0)
    assert before.others_busy_cores(CpuClock(102.0, 13.0, 52.0)) == 0.0  # clock granularity never goes negative
    assert before.others_busy_cores(CpuClock(None, 13.0, 52.0)) is None
    assert busy_warning(None) is None and busy_warning(QUIET_CORES) is None  # unmeasured, or quiet enough
    assert busy_warning(1.0) == f"other processes kept 1.00 cores busy (more than {QUIET_CORES})"


def test_a_checkpoints_bench_times_that_model_on_its_own_test_sentences(smoke_checkpoint):
    """`seqlab bench ckpt=...`: the bench takes the model's shape and vocabulary, whatever its own defaults
    (TINY's 64-token vocabulary is not the smoke model's), and decodes the corpus's test sources."""
    from dataclasses import replace

    from seqlab.checkpoint import load_for_inference

    model_cfg = load_for_inference(str(smoke_checkpoint), device="cpu")[0].cfg
    assert (model_cfg.src_vocab_size, model_cfg.d_model) != (TINY.vocab, TINY.d_model)
    r = run_bench(replace(TINY, train_repeats=1), ckpt=str(smoke_checkpoint), scaling=False)
    assert r.ckpt == str(smoke_checkpoint)
    assert (r.config["vocab"], r.config["d_model"], r.config["layers"]) == (
        model_cfg.src_vocab_size, model_cfg.d_model, model_cfg.encoder_layers)
    assert all(t.seqlab.tokens_per_s > 0 and t.hf.tokens_per_s > 0 for t in r.train.values())
    assert r.outputs_identical is True and all(d.sources == TINY.decode_sources for d in r.decode.values())


def test_run_bench_times_both_toolkits_and_their_outputs_agree(tmp_path):
    torch.manual_seed(0)
    r = run_bench(TINY, ckpt=None, scaling=False)
    assert r.outputs_identical is True  # same weights, same rules: HF generate and seqlab agree
    assert list(r.decode) == list(DECODINGS)
    for d in r.decode.values():
        assert d.differing_sources == 0 and d.generated_tokens > 0 and d.sources == TINY.decode_sources
        assert {"bf16", "int8"} <= set(d.engines)
        assert all(0 <= e.same <= e.sources == TINY.decode_sources and e.seconds > 0 for e in d.engines.values())
    for t in r.train.values():
        assert t.seqlab.tokens_per_s > 0 and t.hf.tokens_per_s > 0 and t.seqlab_sdpa is not None
        assert 0 < t.mfu(t.seqlab) < 1 and 0 < t.mfu(t.hf) < 1  # no step outruns the measured matmul peak
    assert BenchResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r  # the archive reads back whole
    table = r.table()
    assert "train tok/s fp32" in table and "beam8 decode tok/s" in table and "outputs identical: True" in table
    assert "greedy int8 tok/s" in table
    assert r.engine_auto in ("seqlab", "seqlab_onednn") and "engine=auto: " in table  # what auto chose here
    assert r.others_busy_cores is not None and "cores busy during the bench" in table  # Linux: /proc/stat
    rendered = performance_page(r, tmp_path)
    assert "| greedy: tokens/s |" in rendered and "| training, bf16: tokens/s |" in rendered
    assert f"other processes' load {r.others_busy_cores:.2f} cores" in rendered
    if importlib.util.find_spec("ctranslate2") is not None:  # the ct2 extra: CTranslate2 on the same sources
        for d in r.decode.values():
            assert {"ct2_fp32", "ct2_int8"} <= set(d.engines)
        assert r.decode["greedy"].engines["ct2_fp32"].same >= TINY.decode_sources - 1  # greedy: the same search
        assert "greedy ct2_int8 tok/s" in table


def test_bench_decode_false_times_training_only_and_a_missing_gpu_fails_first():
    from dataclasses import replace

    from seqlab.config import ConfigError

    r = run_bench(replace(TINY, decode=False, train_repeats=1), ckpt=None, scaling=False)
    assert r.device == "cpu" and r.train["bf16"].ratio > 0
    assert r.decode == {} and r.outputs_identical is None
    assert "outputs identical: not decoded" in r.table()
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="bench.device='cuda'"):
            run_bench(replace(TINY, device="cuda"), ckpt=None, scaling=False)


@pytest.mark.slow
def test_bench_profile_says_where_a_steps_time_goes():
    from dataclasses import replace

    r = run_bench(replace(TINY, decode=False, train_repeats=1), ckpt=None, scaling=False, profile=True)
    assert set(r.profiles) == {"train_bf16_seqlab", "train_bf16_hf", f"beam{TINY.num_beams}_bf16_seqlab"}
    seqlab_ops = r.profiles["train_bf16_seqlab"]
    assert "Self CPU time total" in seqlab_ops and "aten::" in seqlab_ops
    assert "-- profile: train_bf16_hf" in r.table()
    assert BenchResult.from_dict(json.loads(json.dumps(r.to_dict()))).profiles == r.profiles


def test_bench_base_is_the_shape_of_the_wmt14_base_experiment(make_cfg):
    """bench=base (the GPU MFU measurement) has the model of experiment=wmt14_en_de_base: model/base.yaml's
    sizes, one size for both stacks, the corpus's joint vocabulary."""
    bench = make_cfg("bench", ["bench=base"]).bench
    experiment = make_cfg("train", ["experiment=wmt14_en_de_base"])
    model = experiment.model
    assert (bench.d_model, bench.n_heads, bench.d_ff) == (model.d_model, model.n_heads, model.d_ff)
    assert bench.layers == model.encoder_layers == model.decoder_layers
    assert bench.vocab == experiment.data.tokenizer.vocab_size and experiment.data.tokenizer.joint
    assert bench.train_steps >= 200  # "a few hundred steps"
    default = make_cfg("bench", []).bench
    assert typed(BenchConfig, plain(default), "bench") == BenchConfig()  # one set of defaults, file and dataclass


@pytest.mark.slow  # the checkpoint's decoding bench covers reading a checkpoint's corpus
def test_train_speed_times_the_corpus_batches_of_a_checkpoint(smoke_checkpoint):
    """The profiling script runs against the library as it is (a script: run, not imported)."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "train_speed.py"), str(smoke_checkpoint),
                           "--steps", "3", "--window", "1", "--precision", "fp32"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("fp32 threads=") and "batches=3" in line
    rates, faults = line.split("tokens/s per 1 steps: ")[1].split("; page faults per step: ")
    assert len(rates.split(" / ")) == len(faults.split(" / ")) == 3
    assert all(float(r.replace(",", "")) > 0 for r in rates.split(" / "))


@pytest.mark.slow  # one more row kind of the bench whose timing loop the toolkit test runs
def test_bench_times_every_position_scheme_beside_sinusoidal(tmp_path):
    from dataclasses import replace

    r = run_bench(replace(TINY, decode=False, train_repeats=1, decode_repeats=1), ckpt=None, scaling=False,
                  positions=True)
    assert set(r.positions) == {"sinusoidal", "learned", "rope", "alibi", "t5", "none"}
    assert all(row.train_step_s > 0 and row.beam_s > 0 for row in r.positions.values())
    assert r.positions["sinusoidal"].train_x_sinusoidal == 1.0
    assert "positions=t5" in r.table()
    assert "| t5 |" in performance_page(r, tmp_path)


def test_trained_checkpoints_decode_their_test_sentences_against_the_first(smoke_checkpoint, tmp_path):
    """`seqlab bench checkpoints=[A,B]`: each checkpoint greedy and beam 5 on the same test sentences; a checkpoint
    of another corpus is refused naming it."""
    import torch

    from seqlab.bench.checkpoints import checkpoint_bench, from_dict, to_dict
    from seqlab.bench.speed import BenchConfig
    from seqlab.config import ConfigError

    cfg = BenchConfig(decode_sources=6, decode_repeats=1)
    rows = checkpoint_bench(cfg, [str(smoke_checkpoint), str(smoke_checkpoint)])
    assert [(r.decoding, r.sources) for r in rows] == [("greedy", 6)] * 2 + [("beam5", 6)] * 2
    assert rows[0].speedup == 1.0 and all(r.tokens > 0 and r.seconds > 0 for r in rows)
    assert rows[0].tokens == rows[1].tokens  # the same model: the same outputs
    assert from_dict(to_dict(rows)) == rows
    state = torch.load(smoke_checkpoint, map_location="cpu", weights_only=True)
    state["seqlab"]["data_config"]["corpus"]["name"] = "another"
    torch.save(state, tmp_path / "other.ckpt")
    with pytest.raises(ConfigError, match=r"other\.ckpt was trained on another corpus"):
        checkpoint_bench(cfg, [str(smoke_checkpoint), str(tmp_path / "other.ckpt")])


@pytest.mark.slow
def test_levers_bench_times_each_lever_keeps_the_loss_and_renders(tmp_path):
    """`seqlab bench levers=true` on this CPU: every lever, both together and HF timed; each lever's first-batch
    loss the plain step's up to rounding; the pipeline's table reads the record."""
    from pipelines.bench_levers import levers_table
    from seqlab.bench.levers import LEVERS, lever_bench, to_dict

    precision, rows, profiles = lever_bench(replace(TINY, train_steps=2, warmup_steps=1, train_repeats=1), profile=True)
    timed = [n for n, (*_, bf16) in LEVERS.items() if precision == "bf16-mixed" or not bf16]
    assert [r.name for r in rows] == [*timed, "Hugging Face"]  # bf16 weights: where levers run in bf16
    assert all(r.tokens_per_s > 0 and r.peak_mb > 0 and r.mfu > 0 for r in rows)
    assert rows[0].loss_delta == 0.0 and all(abs(r.loss_delta) < 1e-2 for r in rows[1:-1])
    assert rows[-1].loss_delta is None and precision in ("bf16-mixed", "32-true")
    assert "Self CPU time total" in profiles["all compiled"]
    text = levers_table({"result": {"levers": to_dict(rows)}})
    assert "| fused loss, compiled |" in text and "| all compiled |" in text and "| Hugging Face |" in text


def test_the_norms_bench_times_both_norms_and_renders_on_the_study_page(tmp_path):
    """`seqlab bench norms=true`: LayerNorm and RMSNorm timed in one run, LayerNorm at 1.00x of itself, the
    models differing in the norm alone, each decoding to the length limit; the study page's table reads the
    record."""
    from pipelines.bench_norms import norms_table
    from seqlab.bench.norms import norm_bench, to_dict
    from seqlab.bench.speed import seqlab_decode
    from seqlab.model import Seq2SeqTransformer

    src, pad = torch.randint(4, 64, (3, 6)), torch.zeros(3, 6, dtype=torch.bool)
    for norm in ("layernorm", "rmsnorm"):
        model = Seq2SeqTransformer(TINY.model_config(norm=norm)).eval()
        for beams in (1, 2):
            assert sum(map(len, seqlab_decode(model, src, pad, beams, 5, memory=False, min_new=5)[0])) == 15

    precision, rows = norm_bench(TINY)
    assert [r.norm for r in rows] == ["layernorm", "rmsnorm"] and precision in ("bf16-mixed", "32-true")
    assert rows[0].train_x_layernorm == rows[0].greedy_x_layernorm == rows[0].beam5_x_layernorm == 1.0
    assert all(r.train_tokens_per_s > 0 and r.greedy_tokens_per_s > 0 and r.beam5_tokens_per_s > 0 for r in rows)
    text = norms_table({"result": {"norms": to_dict(rows), "precision": precision}})
    assert "| rmsnorm |" in text and "training, " in text


def test_a_gpu_bench_tolerates_a_quarter_core_per_two_host_cores():
    """A 2-core CPU bench tolerates QUIET_CORES of other load; a GPU bench on a 16-core host 2 cores (its driver's
    threads alone use a quarter core there), and says so when more."""
    from seqlab.hardware import gpu_host_tolerance

    assert gpu_host_tolerance(2) == QUIET_CORES and gpu_host_tolerance(16) == 8 * QUIET_CORES
    assert busy_warning(0.3) is not None and busy_warning(0.3, gpu_host_tolerance(16)) is None
    assert "more than 2" in busy_warning(2.5, gpu_host_tolerance(16))


def test_the_speculative_bench_times_prompt_lookup_and_drafts_against_greedy(smoke_checkpoint):
    """`seqlab bench speculative=true ckpt=... drafts=[...]`: every setting on the same test sentences, outputs
    equal plain greedy's, the model drafting for itself keeps every proposal; CTranslate2 and generate (greedy
    and its prompt lookup, one source a call, seqlab's length limits) beside, their outputs equal too."""
    from seqlab.bench.speculative import from_dict, speculative_bench, to_dict
    from seqlab.config import ConfigError

    rows = speculative_bench(BenchConfig(decode_sources=6, decode_repeats=1), str(smoke_checkpoint),
                             [str(smoke_checkpoint)])
    names = [r.setting for r in rows]
    assert names[:4] == ["greedy", "greedy_lookup2", "greedy_lookup5", "greedy_lookup5a"]
    assert sum(r.draft.startswith("ckpt:") for r in rows) == 2
    assert all(r.equal == r.sources == 6 for r in rows)
    assert rows[0].speedup == 1.0 and rows[0].acceptance is None
    assert all(r.acceptance == 1.0 for r in rows if r.draft.startswith("ckpt:"))
    assert all(0.0 <= r.acceptance <= 1.0 for r in rows if r.draft == "lookup" and not r.model)
    assert ("ctranslate2_greedy" in names) == (importlib.util.find_spec("ctranslate2") is not None)
    # generate on the same weights, one source a call: greedy and its prompt lookup, timed against its greedy
    hf = [r for r in rows if r.model == "hf generate"]
    assert [r.setting for r in hf] == ["greedy", "greedy_lookup2", "greedy_lookup5"] and all(r.batch == 1 for r in hf)
    assert hf[0].speedup == 1.0 and all(r.draft == "lookup" for r in hf[1:])
    assert from_dict(to_dict(rows)) == rows
    with pytest.raises(ConfigError, match="give ckpt=RUN_DIR"):
        speculative_bench(BenchConfig(), None, [])


def test_the_speculative_bench_leaves_out_the_peers_that_cannot_compute_the_model(smoke_checkpoint, monkeypatch):
    """A model CTranslate2 and Hugging Face refuse (the reference summarizer's copy attention): their rows are left
    out, said in the log, and seqlab's settings are timed as ever."""
    import seqlab.interop
    from seqlab.bench.speculative import speculative_bench
    from seqlab.engines.ct2 import CT2Engine
    from seqlab.interop.families import InteropError

    def refused(*args, **kwargs):
        raise InteropError("model.copy_attention=true: no counterpart")

    monkeypatch.setattr(CT2Engine, "for_checkpoint", refused)
    monkeypatch.setattr(seqlab.interop, "to_hf", refused)
    rows = speculative_bench(BenchConfig(decode_sources=3, decode_repeats=1), str(smoke_checkpoint), [])
    assert [r.setting for r in rows] == ["greedy", "greedy_lookup2", "greedy_lookup5", "greedy_lookup5a"]
    assert all(r.equal == r.sources == 3 and not r.model for r in rows)


def test_the_speculative_bench_without_a_checkpoint_times_prompt_lookup_at_gpt2s_shape(monkeypatch):
    """Without ckpt: prompt lookup against greedy on a random GPT-2-shaped model, each engine and batch, Hugging
    Face's prompt lookup and CTranslate2 beside, every output equal seqlab's greedy (the shape shrunk for the
    test)."""
    from seqlab.bench import causal
    from seqlab.bench.speculative import causal_speculative_bench

    tiny = dict(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=64, bos_token_id=63, eos_token_id=63)
    monkeypatch.setitem(causal.SHAPES, "gpt2", ("gpt2", tiny))
    rows = causal_speculative_bench(BenchConfig(seq_len=8, max_new_tokens=6, decode_repeats=1))
    assert {(r.batch, r.setting) for r in rows} >= {(b, s) for b in (1, 8, 32)
                                                     for s in ("greedy", "greedy_lookup2", "greedy_lookup5")}
    assert all(r.equal == r.sources for r in rows)
    assert all((r.acceptance is None) == (r.draft == "none") for r in rows if "seqlab" in r.model)
    hf = [r.setting for r in rows if r.model.endswith("hf generate")]
    assert hf == ["greedy", "greedy_lookup2", "greedy_lookup5"]  # Hugging Face's prompt lookup, one prompt a call
    assert any(r.model.endswith("ctranslate2") for r in rows) == (importlib.util.find_spec("ctranslate2") is not None)


def test_the_comet_bench_times_a_sweep_and_mbr_and_compares_with_the_library_where_it_runs(monkeypatch):
    """`seqlab bench comet=true`: at a small shape here; unbabel-comet's side only where its environment is
    (make comet-fixtures), and then every score agrees."""
    from seqlab.bench import neural

    monkeypatch.setattr(neural, "SHAPE", {**neural.SHAPE, "hidden_size": 32, "num_hidden_layers": 2,
                                          "num_attention_heads": 2, "intermediate_size": 64})
    monkeypatch.setattr(neural, "SEGMENTS", 12)
    monkeypatch.setattr(neural, "MBR_SOURCES", 2)
    monkeypatch.setattr(neural, "MBR_CANDIDATES", 4)
    library = neural.ROOT / ".venv-comet" / "bin" / "python"
    rows = neural.neural_bench(BenchConfig(), str(library) if library.exists() else None)
    sweep, mbr = rows
    assert (sweep.task, sweep.items, mbr.items) == ("sweep", 12 * 5, 2 * 4 * 4)
    data = neural.inputs()
    shared = set(data["sources"]) | set(data["references"])
    assert sweep.encoded == len(shared | {h for system in data["systems"] for h in system})
    if library.exists():
        assert sweep.max_diff < 1e-5 and mbr.max_diff < 1e-5 and sweep.x_library > 0
    else:
        assert sweep.library_s is None and sweep.x_library is None
