"""`seqlab bench`'s measurement: seqlab against Hugging Face MarianMTModel with identical weights, batches,
threads and precision, and seqlab's other engines and CTranslate2 beside them (seqlab.bench.speed has
the single measurements, bench_result the typed result).

Every time is the fastest of its repeats, the sides alternating within each repeat (`hardware.best_of`).
"""

from __future__ import annotations

import copy
import itertools
import logging
import os
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from seqlab.bench.result import (
    BenchResult,
    DecodeComparison,
    EngineRun,
    PositionTiming,
    Throughput,
    TrainComparison,
)
from seqlab.bench.speed import (
    BenchConfig,
    bench_optimizer,
    ct2_decode,
    decode_sources,
    hf_decode,
    hf_train_step,
    matmul_peak,
    on_cuda,
    profile_table,
    random_batch,
    run_train_step,
    seqlab_decode,
    seqlab_train_step,
    train_flops,
    train_throughput,
)
from seqlab.checkpoint import load_for_inference
from seqlab.config import resolve_device
from seqlab.data import DataConfig, load_split
from seqlab.engines.choice import choose_engine
from seqlab.engines.ct2 import CT2Engine
from seqlab.hardware import CpuClock, best_of, busy_warning, cpu_description
from seqlab.interop import to_hf
from seqlab.interop.ct2 import export_ctranslate2
from seqlab.model import Model, Seq2SeqTransformer
from seqlab.model.onednn import onednn_available, onednn_linears
from seqlab.model.quantize import dynamic_int8

log = logging.getLogger("seqlab.bench")
Seqs = list[list[int]]
POSITION_SCHEMES = ("sinusoidal", "learned", "rope", "alibi", "t5", "none")


def run_bench(cfg: BenchConfig, ckpt: str | None, scaling: bool, positions: bool = False,
              profile: bool = False) -> BenchResult:
    device = resolve_device("bench", cfg.device)  # a bad value fails before anything is built
    clock = CpuClock.now()  # what else kept the machine busy while the bench ran (recorded, warned about)
    torch.manual_seed(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)
    tokenizer, texts = None, None
    if ckpt:
        model, tokenizer, info = load_for_inference(ckpt, device=device)
        cfg = cfg.shaped_like(model.cfg)
        texts = [e.source for e in load_split(DataConfig.from_dict(info.data_config).corpus, "test")]
    else:
        model = Seq2SeqTransformer(cfg.model_config()).to(device)
    batches = [random_batch(cfg, g, device=device) for _ in range(cfg.warmup_steps + cfg.train_steps)]
    step_flops = train_flops(model.cfg, cfg.batch, cfg.seq_len, cfg.seq_len)
    train = {tag: train_comparison(cfg, model, batches, precision, step_flops)
             for precision, tag in (("32", "fp32"), ("bf16-mixed", "bf16"))}
    src = pad = None
    if cfg.decode or scaling or positions or profile:
        src, pad = decode_sources(cfg, g, tokenizer, texts, device)
    auto = choose_engine("fp32", str(device), None, cfg.num_beams)  # the beam row's, probed afresh (not cached)
    decode = decode_comparison(cfg, model, src, pad) if cfg.decode else {}
    scaling_rows = scaling_table(cfg, model, src, pad) if scaling else None
    position_rows = positions_table(cfg, device, src, pad) if positions else {}
    profiled = profiles(cfg, model, batches, src, pad) if profile else {}
    others = clock.others_busy_cores(CpuClock.now())
    if why := busy_warning(others):
        log.warning("%s during the bench: its timings are unreliable; run it on a quiet machine", why)
    return BenchResult(
        config=asdict(cfg), ckpt=ckpt, torch=torch.__version__,
        device=torch.cuda.get_device_name(device) if on_cuda(device) else "cpu", threads=torch.get_num_threads(),
        cpu=cpu_description(), huge_page_allocator=os.environ.get("THP_MEM_ALLOC_ENABLE", "0") == "1",
        train=train, decode=decode, scaling=scaling_rows, positions=position_rows,
        engine_auto=auto.engine, engine_auto_reason=auto.reason, others_busy_cores=others, profiles=profiled)


def train_comparison(cfg: BenchConfig, model: Model, batches: list[dict[str, torch.Tensor]],
                     precision: str, step_flops: float) -> TrainComparison:
    """Training tokens/s of seqlab and HF (fresh copies of `model`: training changes weights), and seqlab
    with PyTorch's fused attention throughout (the attention-kernel lever alone; only a CPU has the choice)."""
    device = batches[0]["src"].device
    torch.manual_seed(cfg.seed)
    models = {"seqlab": copy.deepcopy(model), "hf": to_hf(model).to(device)}
    if device.type == "cpu":
        models["sdpa"] = Seq2SeqTransformer(replace(model.cfg, attention_kernel="sdpa")).to(device)
        models["sdpa"].load_state_dict(model.state_dict())
    steps = {"seqlab": seqlab_train_step, "sdpa": seqlab_train_step, "hf": hf_train_step}

    def run(name: str) -> tuple[Throughput, float]:
        r = train_throughput(models[name], steps[name](models[name], cfg.label_smoothing), batches, precision,
                             cfg.warmup_steps)
        return r, r.step_s

    best = {name: r for name, (r, _) in best_of({n: lambda n=n: run(n) for n in models}, cfg.train_repeats).items()}
    peak = matmul_peak(torch.float32 if precision == "32" else torch.bfloat16, device)
    log.info("train %s: seqlab %.0f tok/s, HF %.0f tok/s", precision, best["seqlab"].tokens_per_s,
             best["hf"].tokens_per_s)
    return TrainComparison(best["seqlab"], best["hf"], best.get("sdpa"), peak, step_flops)


def profiles(cfg: BenchConfig, model: Model, batches: list[dict[str, torch.Tensor]],
             src: torch.Tensor, pad: torch.Tensor) -> dict[str, str]:
    """Where the time goes when a goal is missed (`seqlab bench profile=true`): torch.profiler's operator
    tables of a bf16 training step, seqlab's and HF's (fresh copies, a few steps each), and of seqlab's
    beam search in bf16."""
    tables = {}
    for name, m in (("train_bf16_seqlab", copy.deepcopy(model)), ("train_bf16_hf", to_hf(model).to(src.device))):
        m.train()
        step = (seqlab_train_step if name.endswith("seqlab") else hf_train_step)(m, cfg.label_smoothing)
        opt, batch = bench_optimizer(m), itertools.cycle(batches)
        tables[name] = profile_table(lambda step=step, opt=opt, batch=batch: run_train_step(step, opt, next(batch),
                                                                                          "bf16-mixed"), src.device)
    model.eval()
    tables[f"beam{cfg.num_beams}_bf16_seqlab"] = profile_table(
        lambda: seqlab_decode(model, src, pad, cfg.num_beams, cfg.max_new_tokens, bf16=True, memory=False),
        src.device, repeats=2)
    return tables


def decode_settings(cfg: BenchConfig) -> list[tuple[str, int]]:
    """The decodings timed against HF: greedy, beam `num_beams` and beam 8."""
    return [("greedy", 1), ("beam", cfg.num_beams), ("beam8", 8)]


def same(a: Seqs, b: Seqs) -> int:
    return sum(x == y for x, y in zip(a, b, strict=True))


def decode_comparison(cfg: BenchConfig, model: Model, src: torch.Tensor, pad: torch.Tensor
                      ) -> dict[str, DecodeComparison]:
    """Each setting: seqlab fp32 and HF (outputs compared), then seqlab in bf16, on a CPU seqlab's int8 and
    oneDNN engines and CTranslate2 in fp32 and int8, on a GPU seqlab with CUDA graphs in fp32 and bf16 (their
    outputs compared with seqlab's or HF's: `ENGINES`)."""
    model.eval()
    hf = to_hf(model).to(src.device).eval()
    variants: dict[str, Model] = {}
    if src.device.type == "cpu":
        variants["int8"] = dynamic_int8(model)
        if onednn_available():
            variants["onednn"] = onednn_linears(model)
    result, outputs = {}, {}
    for name, beams in decode_settings(cfg):
        # The first run of each measures peak memory from a trimmed heap; the times are the fastest of
        # `decode_repeats` later runs, on a warm heap.
        ours_mem = seqlab_decode(model, src, pad, beams, cfg.max_new_tokens)[2]
        hf_mem = hf_decode(hf, src, pad, beams, cfg.max_new_tokens)[2]
        best = best_of({"seqlab": lambda b=beams: seqlab_decode(model, src, pad, b, cfg.max_new_tokens,
                                                                memory=False)[:2],
                        "hf": lambda b=beams: hf_decode(hf, src, pad, b, cfg.max_new_tokens, memory=False)[:2]},
                       cfg.decode_repeats)
        (ours, ours_s), (theirs, hf_s) = best["seqlab"], best["hf"]
        outputs[name] = ours
        runs = {"bf16": lambda b=beams: seqlab_decode(model, src, pad, b, cfg.max_new_tokens, bf16=True,
                                                      memory=False)[:2]}
        runs.update({tag: (lambda v=v, b=beams: seqlab_decode(v, src, pad, b, cfg.max_new_tokens, memory=False)[:2])
                     for tag, v in variants.items()})
        if on_cuda(src.device) and model.step_at_blocker() is None:
            runs.update({tag: (lambda b=beams, bf16=bf16: seqlab_decode(
                model, src, pad, b, cfg.max_new_tokens, bf16=bf16, memory=False, graphs=True)[:2])
                for tag, bf16 in (("graphs", False), ("graphs_bf16", True))})
        timed = best_of(runs, cfg.decode_repeats)
        compared = {"onednn": theirs, "graphs": theirs, "graphs_bf16": timed["bf16"][0]}
        engines = {}
        for tag, (seqs, seconds) in timed.items():
            engines[tag] = EngineRun(sum(map(len, seqs)) / seconds, seconds, same(seqs, compared.get(tag, ours)),
                                     len(seqs))
            log.info("%s %s: %.3fs, %d of %d equal", name, tag, seconds, engines[tag].same, len(seqs))
        result[name] = DecodeComparison(beams, ours_s, hf_s, ours_mem, hf_mem, sum(map(len, ours)), len(ours),
                                        len(ours) - same(ours, theirs), engines)
        log.info("%s: seqlab %.2fs, HF %.2fs, %d differ", name, ours_s, hf_s, len(ours) - same(ours, theirs))
    ct2_comparison(cfg, model, src, pad, result, outputs)
    return result


def ct2_comparison(cfg: BenchConfig, model: Model, src: torch.Tensor, pad: torch.Tensor,
                   result: dict[str, DecodeComparison], reference: dict[str, Seqs]) -> None:
    """CTranslate2 fp32 and int8 on the same sources, threads and settings, on the same device (the deployment
    peer on a GPU too), added to each setting's engines and compared with seqlab's fp32 outputs (`reference`);
    left out, saying so, without CTranslate2 or, on a GPU, where its build sees no CUDA device or cannot load
    its CUDA libraries."""
    try:
        import ctranslate2
    except ImportError:
        log.warning("ctranslate2 is not installed: its rows are left out (pip install 'seqlab[ct2]')")
        return
    device = torch.device(src.device)
    if device.type == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        log.warning("this ctranslate2 build sees no CUDA device: its rows are left out on the GPU")
        return
    with tempfile.TemporaryDirectory() as tmp:
        for precision, quantization in (("fp32", None), ("int8", "int8")):
            path = export_ctranslate2(model, None, Path(tmp) / precision, quantization)
            try:
                engine = CT2Engine(path, model, None, "float32" if quantization is None else "int8",
                                   device=device.type, device_index=device.index or 0, own_process=True)
            except RuntimeError as err:  # a wheel built for another CUDA than the machine's
                if device.type == "cpu":
                    raise
                log.warning("CTranslate2 does not run on this GPU (%s): its rows are left out", err)
                return
            for name, beams in decode_settings(cfg):
                ct2_decode(engine, src, pad, beams, cfg.max_new_tokens)  # warms CTranslate2 up
                run = {"ct2": lambda e=engine, b=beams: ct2_decode(e, src, pad, b, cfg.max_new_tokens)}
                seqs, seconds = best_of(run, cfg.decode_repeats)["ct2"]
                result[name].engines[f"ct2_{precision}"] = EngineRun(sum(map(len, seqs)) / seconds, seconds,
                                                                     same(seqs, reference[name]), len(seqs))
                log.info("%s CTranslate2 %s: %.2fs (seqlab fp32 %.2fs)", name, precision, seconds,
                         result[name].seqlab_s)


def scaling_table(cfg: BenchConfig, model: Model, src: torch.Tensor, pad: torch.Tensor) -> dict:
    """seqlab alone: training step time against sequence length and model size, decoding against beams."""
    g = torch.Generator().manual_seed(cfg.seed + 1)
    device = src.device
    table: dict[str, Any] = {"train_seq_len": {}, "train_model": {}, "decode_beams": {}}
    for n in (20, 40, 80):
        batches = [random_batch(cfg, g, seq_len=n, device=device) for _ in range(4)]
        m = Seq2SeqTransformer(cfg.model_config()).to(device)
        r = train_throughput(m, seqlab_train_step(m, cfg.label_smoothing), batches, "32", 1)
        table["train_seq_len"][n] = {"step_s": r.step_s, "tokens_per_s": r.tokens_per_s}
    for name, overrides in (("d256_3+3", {}), ("d512_3+3", {"d_model": 512, "n_heads": 8, "d_ff": 2048}),
                            ("d512_6+6", {"d_model": 512, "n_heads": 8, "d_ff": 2048,
                                          "encoder_layers": 6, "decoder_layers": 6})):
        m = Seq2SeqTransformer(cfg.model_config(**overrides)).to(device)
        batches = [random_batch(cfg, g, device=device) for _ in range(4)]
        r = train_throughput(m, seqlab_train_step(m, cfg.label_smoothing), batches, "32", 1)
        table["train_model"][name] = {"step_s": r.step_s, "tokens_per_s": r.tokens_per_s,
                                      "gflop_per_step": train_flops(m.cfg, cfg.batch, cfg.seq_len, cfg.seq_len) / 1e9}
    model.eval()
    for beams in (1, 2, 4, 8):
        _, seconds, mem = seqlab_decode(model, src, pad, beams, cfg.max_new_tokens)
        table["decode_beams"][beams] = {"seconds": seconds, "peak_mem_mb": mem}
    return table


def positions_table(cfg: BenchConfig, device: torch.device | str, src: torch.Tensor, pad: torch.Tensor
                    ) -> dict[str, PositionTiming]:
    """seqlab alone, one model shape per position scheme, against sinusoidal positions timed in the same run,
    the schemes alternating within each repeat: fp32 beam search of the freshly initialized models (per
    generated token: a trained model would stop at lengths of its own), then a bf16-mixed training step (the
    recipe's precision)."""
    g = torch.Generator().manual_seed(cfg.seed + 2)
    batches = [random_batch(cfg, g, device=device) for _ in range(cfg.warmup_steps + cfg.train_steps)]
    models = {}
    for scheme in POSITION_SCHEMES:
        torch.manual_seed(cfg.seed)
        models[scheme] = Seq2SeqTransformer(cfg.model_config(positions=scheme)).to(device).eval()
    beams = best_of({s: lambda m=m: seqlab_decode(m, src, pad, cfg.num_beams, cfg.max_new_tokens, memory=False)[:2]
                     for s, m in models.items()}, cfg.decode_repeats)

    def train(m: Model) -> tuple[float, float]:
        step_s = train_throughput(m, seqlab_train_step(m, cfg.label_smoothing), batches, "bf16-mixed",
                                  cfg.warmup_steps).step_s
        return step_s, step_s

    steps = best_of({s: lambda m=m: train(m) for s, m in models.items()}, cfg.train_repeats)
    rate = {s: sum(map(len, seqs)) / seconds for s, (seqs, seconds) in beams.items()}
    for s in POSITION_SCHEMES:
        log.info("positions=%s: train step %.3fs, beam %d %.0f tokens/s", s, steps[s][1], cfg.num_beams, rate[s])
    return {s: PositionTiming(steps[s][1], beams[s][1], sum(map(len, beams[s][0])),
                              steps["sinusoidal"][1] / steps[s][1], rate[s] / rate["sinusoidal"])
            for s in POSITION_SCHEMES}
