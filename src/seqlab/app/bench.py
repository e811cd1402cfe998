"""`make bench`: seqlab against Hugging Face MarianMTModel, same shapes, batches and precision.

seqlab bench [out=results/bench.json] [ckpt=RUN_DIR] [scaling=true] [positions=true] [bench.batch=64 ...]
"""

from __future__ import annotations

import copy
import json
import logging
import os
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig

from seqlab.analysis.speed import (
    BenchConfig,
    ct2_decode,
    decode_sources,
    faster,
    hf_decode,
    hf_train_step,
    matmul_peak,
    on_cuda,
    random_batch,
    seqlab_decode,
    seqlab_train_step,
    train_flops,
    train_throughput,
)
from seqlab.app.configs import plain, typed
from seqlab.app.store import CONF_DIR
from seqlab.checkpoint import load_for_inference
from seqlab.config import resolve_device
from seqlab.data import DataConfig, load_split
from seqlab.hardware import cpu_description
from seqlab.interop import to_hf
from seqlab.interop.ct2 import CT2Engine, export_ctranslate2
from seqlab.io import atomic_write_text
from seqlab.memory import keep_freed_memory
from seqlab.model import Seq2SeqTransformer
from seqlab.model.onednn import onednn_available, onednn_linears
from seqlab.model.quantize import dynamic_int8

log = logging.getLogger("seqlab.bench")


def run_bench(cfg: BenchConfig, ckpt: str | None, scaling: bool, positions: bool = False) -> dict[str, Any]:
    device = resolve_device("bench", cfg.device)  # a bad value fails before anything is built
    keep_freed_memory()
    torch.manual_seed(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)
    tokenizer, texts = None, None
    if ckpt:
        model, tokenizer, info = load_for_inference(ckpt, device=device)
        texts = [e.source for e in load_split(DataConfig.from_dict(info.data_config).corpus, "test")]
        model_cfg = model.cfg
    else:
        model_cfg = cfg.model_config()
        model = Seq2SeqTransformer(model_cfg).to(device)
    result: dict[str, Any] = {"config": asdict(cfg), "ckpt": ckpt, "torch": torch.__version__,
                              "device": torch.cuda.get_device_name(device) if on_cuda(device) else "cpu",
                              "threads": torch.get_num_threads(), "cpu": cpu_description(),
                              "huge_page_allocator": os.environ.get("THP_MEM_ALLOC_ENABLE", "0") == "1"}
    n_steps = cfg.warmup_steps + cfg.train_steps
    batches = [random_batch(cfg, g, device=device) for _ in range(n_steps)]
    result["train_flops_per_step"] = train_flops(model_cfg, cfg.batch, cfg.seq_len, cfg.seq_len)
    for precision, tag in (("32", "fp32"), ("bf16-mixed", "bf16")):
        result.update(train_comparison(cfg, model, batches, precision, tag, result["train_flops_per_step"]))
    src = pad = None
    if cfg.decode or scaling or positions:
        src, pad = decode_sources(cfg, g, tokenizer, texts, device)
    if cfg.decode:
        result.update(decode_comparison(cfg, model, src, pad))
    if scaling:
        result["scaling"] = scaling_table(cfg, model, src, pad)
    if positions:
        result["positions"] = positions_table(cfg, device, src, pad)
    return result


def train_comparison(cfg: BenchConfig, model: Seq2SeqTransformer, batches: list[dict[str, torch.Tensor]],
                     precision: str, tag: str, step_flops: float) -> dict[str, Any]:
    """Training tokens/s of seqlab and HF (fresh copies of `model`: training changes weights), alternating,
    and MFU against this device's measured matmul peak in the same dtype."""
    device = batches[0]["src"].device
    torch.manual_seed(cfg.seed)
    ours_model, hf_model = copy.deepcopy(model), to_hf(model).to(device)
    # The attention-kernel lever alone: the same model through PyTorch's fused SDPA. Only a CPU has a
    # choice to make (`attention_kernel=auto` is SDPA on a GPU already).
    fused = None
    if device.type == "cpu":
        fused = Seq2SeqTransformer(replace(model.cfg, attention_kernel="sdpa")).to(device)
        fused.load_state_dict(model.state_dict())
    ours = theirs = with_sdpa = None
    for _ in range(cfg.train_repeats):  # alternating, so that a slow spell of the VM hits every side
        ours = faster(ours, train_throughput(ours_model, seqlab_train_step(ours_model, cfg.label_smoothing),
                                             batches, precision, cfg.warmup_steps))
        theirs = faster(theirs, train_throughput(hf_model, hf_train_step(hf_model, cfg.label_smoothing),
                                                 batches, precision, cfg.warmup_steps))
        if fused is not None:
            with_sdpa = faster(with_sdpa, train_throughput(fused, seqlab_train_step(fused, cfg.label_smoothing),
                                                           batches, precision, cfg.warmup_steps))
    del ours_model, hf_model, fused
    peak = matmul_peak(torch.float32 if tag == "fp32" else torch.bfloat16, device)
    log.info("train %s: seqlab %.0f tok/s, HF %.0f tok/s", tag, ours["tokens_per_s"], theirs["tokens_per_s"])
    return {f"train_{tag}": {"seqlab": ours, "hf": theirs, "matmul_peak_flops": peak},
            f"train_{tag}_sdpa": with_sdpa,
            f"train_{tag}_ratio": ours["tokens_per_s"] / theirs["tokens_per_s"],
            f"mfu_{tag}": step_flops / ours["step_s"] / peak,
            f"mfu_{tag}_hf": step_flops / theirs["step_s"] / peak}


def decode_comparison(cfg: BenchConfig, model: Seq2SeqTransformer, src: torch.Tensor, pad: torch.Tensor
                      ) -> dict[str, Any]:
    """Greedy, beam and beam 8: seqlab and HF in fp32 (outputs compared), then seqlab in bf16."""
    model.eval()
    hf = to_hf(model).to(src.device).eval()
    result: dict[str, Any] = {}
    fp32_seqs: dict[str, list[list[int]]] = {}  # seqlab's fp32 outputs per setting, the other rows' reference
    hf_fp32_seqs: dict[str, list[list[int]]] = {}
    identical = True
    for name, beams in decode_settings(cfg):
        ours_s = hf_s = float("inf")
        # The first run of each measures peak memory from a trimmed heap; the times are the best of
        # `decode_repeats` runs after it (a shared VM's speed drifts between runs), on a warm heap.
        _, _, ours_mem = seqlab_decode(model, src, pad, beams, cfg.max_new_tokens)
        _, _, hf_mem = hf_decode(hf, src, pad, beams, cfg.max_new_tokens)
        for _ in range(cfg.decode_repeats):
            ours_seqs, seconds, _ = seqlab_decode(model, src, pad, beams, cfg.max_new_tokens, memory=False)
            ours_s = min(ours_s, seconds)
            hf_seqs, seconds, _ = hf_decode(hf, src, pad, beams, cfg.max_new_tokens, memory=False)
            hf_s = min(hf_s, seconds)
        same = ours_seqs == hf_seqs
        identical &= same
        fp32_seqs[name], hf_fp32_seqs[name] = ours_seqs, hf_seqs
        tokens = sum(len(s) for s in ours_seqs)
        result[name] = {"seqlab_tokens_per_s": tokens / ours_s, "hf_tokens_per_s": tokens / hf_s,
                        "seqlab_s": ours_s, "hf_s": hf_s, "seqlab_peak_mem_mb": ours_mem, "hf_peak_mem_mb": hf_mem,
                        "identical": same, "generated_tokens": tokens,
                        "differing_sources": sum(a != b for a, b in zip(ours_seqs, hf_seqs, strict=True))}
        result[f"{name}_ratio"] = hf_s / ours_s
        log.info("%s: seqlab %.2fs, HF %.2fs, identical=%s", name, ours_s, hf_s, same)
        low_s = float("inf")
        for _ in range(cfg.decode_repeats):
            low_seqs, seconds, _ = seqlab_decode(model, src, pad, beams, cfg.max_new_tokens, bf16=True,
                                                 memory=False)
            low_s = min(low_s, seconds)
        result[f"{name}_bf16"] = {"tokens_per_s": sum(len(s) for s in low_seqs) / low_s, "seconds": low_s,
                                  "differing_from_fp32": sum(a != b for a, b in zip(low_seqs, ours_seqs, strict=True)),
                                  "sources": len(ours_seqs)}
    result["outputs_identical"] = identical
    if src.device.type == "cpu":
        result.update(variant_comparison(cfg, dynamic_int8(model), "int8", src, pad, result, fp32_seqs, hf_fp32_seqs))
        if onednn_available():
            result.update(variant_comparison(cfg, onednn_linears(model), "onednn", src, pad, result, fp32_seqs,
                                             hf_fp32_seqs))
        result.update(ct2_comparison(cfg, model, src, pad, result, fp32_seqs))
    return result


def variant_comparison(cfg: BenchConfig, variant: Seq2SeqTransformer, tag: str, src: torch.Tensor, pad: torch.Tensor,
                       seqlab: dict[str, Any], fp32_seqs: dict[str, list[list[int]]],
                       hf_seqs: dict[str, list[list[int]]]) -> dict[str, Any]:
    """seqlab's search on another form of the model (int8 linear layers; fp32 ones on oneDNN's packed
    weights): tokens/s, and how many outputs equal seqlab's fp32 ones and HF's."""
    result: dict[str, Any] = {}
    for name, beams in decode_settings(cfg):
        best = float("inf")
        for _ in range(cfg.decode_repeats):
            seqs, seconds, _ = seqlab_decode(variant, src, pad, beams, cfg.max_new_tokens, memory=False)
            best = min(best, seconds)
        same = {f"same_as_{ref}": sum(a == b for a, b in zip(seqs, by_name[name], strict=True))
                for ref, by_name in (("seqlab_fp32", fp32_seqs), ("hf", hf_seqs))}
        result[f"{name}_{tag}"] = {"tokens_per_s": sum(len(s) for s in seqs) / best, "seconds": best,
                                   "x_hf": seqlab[name]["hf_s"] / best, "sources": len(seqs), **same}
    return result


def ct2_comparison(cfg: BenchConfig, model: Seq2SeqTransformer, src: torch.Tensor, pad: torch.Tensor,
                   seqlab: dict[str, Any], fp32_seqs: dict[str, list[list[int]]]) -> dict[str, Any]:
    """CTranslate2 fp32 and int8 on the same sources, threads and settings (skipped when not installed):
    tokens/s (best of `decode_repeats`) and how many outputs equal seqlab's fp32 ones."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        log.warning("ctranslate2 is not installed: its rows are left out (pip install 'seqlab[ct2]')")
        return {}
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for precision, quantization in (("fp32", None), ("int8", "int8")):
            path = export_ctranslate2(model, None, Path(tmp) / precision, quantization)
            engine = CT2Engine(path, model, None, "float32" if quantization is None else "int8")
            for name, beams in decode_settings(cfg):
                best = float("inf")
                for _ in range(cfg.decode_repeats + 1):  # the first run warms CTranslate2 up
                    seqs, seconds = ct2_decode(engine, src, pad, beams, cfg.max_new_tokens)
                    best = min(best, seconds)
                ours, reference = seqlab[name], fp32_seqs[name]
                tokens = sum(len(s) for s in seqs)
                result[f"{name}_ct2_{precision}"] = {
                    "tokens_per_s": tokens / best, "seconds": best, "x_hf": ours["hf_s"] / best,
                    "seqlab_x": best / ours["seqlab_s"], "sources": len(seqs),
                    "same_as_seqlab_fp32": sum(a == b for a, b in zip(seqs, reference, strict=True))}
                log.info("%s CTranslate2 %s: %.2fs (seqlab fp32 %.2fs)", name, precision, best, ours["seqlab_s"])
    return result


def decode_settings(cfg: BenchConfig) -> list[tuple[str, int]]:
    """The decodings timed against HF: greedy, beam `num_beams` and beam 8."""
    return [("greedy", 1), ("beam", cfg.num_beams), ("beam8", 8)]


def scaling_table(cfg: BenchConfig, model: Seq2SeqTransformer, src: torch.Tensor, pad: torch.Tensor) -> dict:
    """seqlab alone: training step time against sequence length and model size, decoding against beams."""
    g = torch.Generator().manual_seed(cfg.seed + 1)
    device = src.device
    table: dict[str, Any] = {"train_seq_len": {}, "train_model": {}, "decode_beams": {}}
    for n in (20, 40, 80):
        batches = [random_batch(cfg, g, seq_len=n, device=device) for _ in range(4)]
        m = Seq2SeqTransformer(cfg.model_config()).to(device)
        r = train_throughput(m, seqlab_train_step(m, cfg.label_smoothing), batches, "32", 1)
        table["train_seq_len"][n] = {"step_s": r["step_s"], "tokens_per_s": r["tokens_per_s"]}
    for name, overrides in (("d256_3+3", {}), ("d512_3+3", {"d_model": 512, "n_heads": 8, "d_ff": 2048}),
                            ("d512_6+6", {"d_model": 512, "n_heads": 8, "d_ff": 2048,
                                          "encoder_layers": 6, "decoder_layers": 6})):
        m = Seq2SeqTransformer(cfg.model_config(**overrides)).to(device)
        batches = [random_batch(cfg, g, device=device) for _ in range(4)]
        r = train_throughput(m, seqlab_train_step(m, cfg.label_smoothing), batches, "32", 1)
        table["train_model"][name] = {"step_s": r["step_s"], "tokens_per_s": r["tokens_per_s"],
                                      "gflop_per_step": train_flops(m.cfg, cfg.batch, cfg.seq_len, cfg.seq_len) / 1e9}
    model.eval()
    for beams in (1, 2, 4, 8):
        _, seconds, mem = seqlab_decode(model, src, pad, beams, cfg.max_new_tokens)
        table["decode_beams"][beams] = {"seconds": seconds, "peak_mem_mb": mem}
    return table


POSITION_SCHEMES = ("sinusoidal", "learned", "rope", "alibi", "t5", "none")


def positions_table(cfg: BenchConfig, device: torch.device | str, src: torch.Tensor, pad: torch.Tensor
                    ) -> dict[str, Any]:
    """seqlab alone, one model shape per position scheme: a bf16-mixed training step (the recipe's
    precision) and fp32 beam search, each against sinusoidal positions timed in the same run."""
    g = torch.Generator().manual_seed(cfg.seed + 2)
    batches = [random_batch(cfg, g, device=device) for _ in range(cfg.warmup_steps + cfg.train_steps)]
    table: dict[str, Any] = {}
    for scheme in POSITION_SCHEMES:
        torch.manual_seed(cfg.seed)
        m = Seq2SeqTransformer(cfg.model_config(positions=scheme)).to(device)
        r = train_throughput(m, seqlab_train_step(m, cfg.label_smoothing), batches, "bf16-mixed", cfg.warmup_steps)
        m.eval()
        seconds = min(seqlab_decode(m, src, pad, cfg.num_beams, cfg.max_new_tokens, memory=False)[1]
                      for _ in range(cfg.decode_repeats))
        table[scheme] = {"train_step_s": r["step_s"], "beam_s": seconds}
        log.info("positions=%s: train step %.3fs, beam %d %.2fs", scheme, r["step_s"], cfg.num_beams, seconds)
    base = table["sinusoidal"]
    for row in table.values():
        row["train_x_sinusoidal"] = base["train_step_s"] / row["train_step_s"]
        row["beam_x_sinusoidal"] = base["beam_s"] / row["beam_s"]
    return table


def bench_table(r: dict[str, Any]) -> str:
    where = r["cpu"] if r["device"] == "cpu" else f"{r['device']} (host: {r['cpu']})"
    lines = [f"{where}; threads {r['threads']}; torch {r['torch']}; "
             f"THP_MEM_ALLOC_ENABLE={int(r['huge_page_allocator'])}",
             f"{'measure':<28}{'seqlab':>14}{'HF':>14}{'ratio':>9}"]
    for tag in ("fp32", "bf16"):
        ours, theirs = r[f"train_{tag}"]["seqlab"], r[f"train_{tag}"]["hf"]
        lines.append(f"{'train tok/s ' + tag:<28}{ours['tokens_per_s']:>14,.0f}{theirs['tokens_per_s']:>14,.0f}"
                     f"{r[f'train_{tag}_ratio']:>9.2f}")
        lines.append(f"{'train peak MiB ' + tag:<28}{ours['peak_mem_mb']:>14,.0f}{theirs['peak_mem_mb']:>14,.0f}")
        lines.append(f"{'MFU ' + tag:<28}{r[f'mfu_{tag}']:>14.1%}{r[f'mfu_{tag}_hf']:>14.1%}")
        if r[f"train_{tag}_sdpa"] is None:  # only measured on a CPU
            continue
        sdpa = r[f"train_{tag}_sdpa"]["tokens_per_s"]
        lines.append(f"{'  same, fused SDPA ' + tag:<28}{sdpa:>14,.0f}{'':>14}{sdpa / theirs['tokens_per_s']:>9.2f}")
    for name in [n for n in ("greedy", "beam", "beam8") if n in r]:
        d = r[name]
        lines.append(f"{name + ' decode tok/s':<28}{d['seqlab_tokens_per_s']:>14,.0f}{d['hf_tokens_per_s']:>14,.0f}"
                     f"{r[f'{name}_ratio']:>9.2f}")
        lines.append(f"{name + ' decode peak MiB':<28}{d['seqlab_peak_mem_mb']:>14,.0f}{d['hf_peak_mem_mb']:>14,.0f}")
        low = r[f"{name}_bf16"]
        lines.append(f"{'  ' + name + ' bf16 tok/s':<28}{low['tokens_per_s']:>14,.0f}{'':>14}"
                     f"{low['tokens_per_s'] / d['hf_tokens_per_s']:>9.2f}  ({low['differing_from_fp32']} of "
                     f"{low['sources']} outputs differ from fp32)")
        q = r.get(f"{name}_int8")
        if q is not None:
            lines.append(f"{'  ' + name + ' int8 tok/s':<28}{q['tokens_per_s']:>14,.0f}{'':>14}{q['x_hf']:>9.2f}"
                         f"  ({q['same_as_seqlab_fp32']} of {q['sources']} outputs equal fp32's)")
        f = r.get(f"{name}_onednn")
        if f is not None:
            ct2 = r.get(f"{name}_ct2_fp32")
            versus = f"; {ct2['seconds'] / f['seconds']:.2f}x CTranslate2 fp32" if ct2 else ""
            lines.append(f"{'  ' + name + ' oneDNN fp32 tok/s':<28}{f['tokens_per_s']:>14,.0f}{'':>14}{f['x_hf']:>9.2f}"
                         f"  ({f['same_as_hf']} of {f['sources']} outputs equal HF's{versus})")
        for precision in ("fp32", "int8"):
            c = r.get(f"{name}_ct2_{precision}")
            if c is not None:
                lines.append(f"{'  ' + name + ' CTranslate2 ' + precision:<28}{c['tokens_per_s']:>14,.0f}{'':>14}"
                             f"{c['x_hf']:>9.2f}  (seqlab fp32 = {c['seqlab_x']:.2f}x it; {c['same_as_seqlab_fp32']}"
                             f" of {c['sources']} outputs equal seqlab fp32's)")
    lines.append(f"outputs identical: {r.get('outputs_identical', 'not decoded')}; "
                 f"train GFLOP/step {r['train_flops_per_step'] / 1e9:.1f}; "
                 f"matmul peak fp32 {r['train_fp32']['matmul_peak_flops'] / 1e9:.0f} GFLOP/s, "
                 f"bf16 {r['train_bf16']['matmul_peak_flops'] / 1e9:.0f} GFLOP/s")
    for scheme, row in (r.get("positions") or {}).items():
        lines.append(f"{'positions=' + scheme:<28}train {row['train_x_sinusoidal']:.2f}x, "
                     f"beam {row['beam_x_sinusoidal']:.2f}x sinusoidal's speed")
    return "\n".join(lines)


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="bench")
def main(cfg: DictConfig) -> None:
    bench = typed(BenchConfig, plain(cfg.bench), "bench")
    result = run_bench(bench, cfg.ckpt, cfg.scaling, cfg.positions)
    out = Path(cfg.out)
    atomic_write_text(out, json.dumps(result, indent=2, default=str))
    print(bench_table(result))
    print(f"wrote {out}")


def run() -> int:
    """`seqlab bench`."""
    main()
    return 0
