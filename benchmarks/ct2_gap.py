"""Where seqlab's fp32 beam search loses to CTranslate2's: `python benchmarks/ct2_gap.py CKPT [--beams 5]`.

Both engines decode the checkpoint's first 64 test sources (the bench's sentences), at most 40 new tokens,
2 threads, best of 3 after a warm-up. They run twice:
- as the bench runs them;
- with 40 tokens forced (`min_length=40`), so both do the same work: every row, every step. The stopping
  rules then cannot explain a difference.

First it times the decoder's products through PyTorch's fp32 matmul and through oneDNN's packed linear.
Then it prints one seqlab forced run's torch.profiler summary: the linear layers' time in the loop against
the same products timed alone, the attention kernels, and everything else; and the speed of attention
written out as matmuls (`attention_kernel=math`) against the fused kernel. Prints the CPU's flags.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from seqlab.analysis.speed import BenchConfig, decode_sources
from seqlab.checkpoint import load_for_inference
from seqlab.data import DataConfig, load_split
from seqlab.decoding import DecodingConfig, generate
from seqlab.hardware import best_ms, cpu_description
from seqlab.interop.ct2 import CT2Engine, export_ctranslate2
from seqlab.memory import keep_freed_memory
from seqlab.model.layers import MultiHeadAttention
from seqlab.model.onednn import PackedLinear


def best_seconds(fn: Callable[[], Any], repeats: int = 3) -> float:
    """The fastest of `repeats` runs after one warm-up (hardware.best_ms, in seconds)."""
    return best_ms(fn, repeats, warmup=1) / 1e3


def linear_seconds_alone(events: Any) -> float:
    """The profiled matrix products' shapes, each timed alone as often as the loop ran it."""
    total = 0.0
    for e in events:
        if e.key not in ("aten::addmm", "aten::mm") or not e.input_shapes:
            continue
        shapes = [s for s in e.input_shapes if len(s) == 2]
        (m, k), (_, n) = shapes[0], shapes[1]
        a, b = torch.randn(m, k), torch.randn(k, n)
        total += best_seconds(lambda a=a, b=b: a @ b, 10) * e.count
    return total


def gemm_rates(rows: int = 320) -> None:
    """The decoder's products (beam 5 x 64 sources = 320 rows) through PyTorch's fp32 matmul and through
    oneDNN's packed linear (model.onednn), GFLOP/s, best of 20."""
    import torch.nn.functional as F

    for k, n in ((256, 768), (256, 256), (256, 1024), (1024, 256), (256, 8000)):
        x, linear = torch.randn(rows, k), torch.nn.Linear(k, n)
        packed, flop = PackedLinear(linear), 2 * rows * k * n
        default = flop / best_seconds(lambda x=x, linear=linear: F.linear(x, linear.weight, linear.bias), 20) / 1e9
        onednn = flop / best_seconds(lambda x=x, packed=packed: packed(x), 20) / 1e9
        print(f"{rows} x {k} x {n}: torch fp32 matmul {default:.0f} GFLOP/s, oneDNN packed {onednn:.0f} GFLOP/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ckpt")
    parser.add_argument("--beams", type=int, default=5)
    args = parser.parse_args()
    keep_freed_memory()
    torch.set_num_threads(2)
    print(cpu_description())
    gemm_rates()
    model, tokenizer, info = load_for_inference(args.ckpt)
    texts = [e.source for e in load_split(DataConfig.from_dict(info.data_config).corpus, "test")][:64]
    src, pad = decode_sources(BenchConfig(), torch.Generator(), tokenizer, texts)
    sources = [row[~p].tolist() for row, p in zip(src, pad, strict=True)]
    with tempfile.TemporaryDirectory() as tmp:
        engine = CT2Engine(export_ctranslate2(model, None, Path(tmp) / "fp32", None), model, None, "float32")
        for forced in (False, True):
            cfg = DecodingConfig(method="beam", num_beams=args.beams, max_length=40, min_length=40 * forced)
            with torch.no_grad():
                ours = best_seconds(lambda cfg=cfg: generate(model, src, pad, cfg))
            theirs = best_seconds(lambda cfg=cfg: engine.translate_ids(sources, cfg, 40))
            print(f"beam {args.beams}, {'40 tokens forced' if forced else 'as in the bench'}: seqlab {ours:.3f} s, "
                  f"CTranslate2 {theirs:.3f} s, seqlab at {theirs / ours:.2f}x its speed")
    cfg = DecodingConfig(method="beam", num_beams=args.beams, max_length=40, min_length=40)
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        generate(model, src, pad, cfg)
    by_name = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}
    total = sum(by_name.values())
    linear = by_name.get("aten::addmm", 0.0) + by_name.get("aten::mm", 0.0)
    attention = sum(v for k, v in by_name.items() if "attention" in k)
    alone = linear_seconds_alone(prof.key_averages(group_by_input_shape=True))
    print(f"profiled seqlab run (40 forced): {total:.3f} s; linear layers {linear:.3f} s (the same products alone: "
          f"{alone:.3f} s); attention kernels {attention:.3f} s; everything else {total - linear - attention:.3f} s")
    cfg = DecodingConfig(method="beam", num_beams=args.beams, max_length=40)
    timed = {}
    for kernel in ("auto", "math"):  # the fused SDPA kernel against attention written out as matmuls
        for module in model.modules():
            if isinstance(module, MultiHeadAttention):
                module.kernel = kernel
        with torch.no_grad():
            timed[kernel] = (best_seconds(lambda: generate(model, src, pad, cfg)),
                             generate(model, src, pad, cfg).sequences[:, 0].tolist())
    same = sum(a == b for a, b in zip(timed["auto"][1], timed["math"][1], strict=True))
    print(f"beam {args.beams} as in the bench, attention written out: {timed['auto'][0] / timed['math'][0]:.2f}x the "
          f"fused kernel's speed, {same} of {len(sources)} outputs unchanged")


if __name__ == "__main__":
    main()
