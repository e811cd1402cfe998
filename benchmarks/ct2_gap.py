"""Where seqlab's fp32 beam search stands against CTranslate2's: `python benchmarks/ct2_gap.py CKPT [--beams 5]`.

Both engines decode the checkpoint's first 64 test sources (the bench's sentences), at most 40 new tokens,
2 threads, best of 3 after a warm-up; seqlab with PyTorch's default fp32 matmul (MKL) and with
`engine=seqlab_onednn`'s packed oneDNN weights. They run twice:
- as the bench runs them;
- with 40 tokens forced (`min_length=40`), so both do the same work: every row, every step. The stopping
  rules then cannot explain a difference (CTranslate2 stops an example when its best beam ends; seqlab,
  as Hugging Face, when it has num_beams finished hypotheses).

First it times the decoder's products through PyTorch's fp32 matmul and through oneDNN's packed linear.
Last it prints the torch.profiler summary of one forced seqlab_onednn run. Prints the CPU's flags.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from seqlab.bench.speed import BenchConfig, decode_sources
from seqlab.checkpoint import load_for_inference
from seqlab.data import DataConfig, load_split
from seqlab.decoding import DecodingConfig, generate
from seqlab.engines.ct2 import CT2Engine
from seqlab.hardware import best_ms, cpu_description
from seqlab.interop.ct2 import export_ctranslate2
from seqlab.memory import keep_freed_memory
from seqlab.model.onednn import PackedLinear, onednn_linears


def best_seconds(fn: Callable[[], Any], repeats: int = 3) -> float:
    """The fastest of `repeats` runs after one warm-up (hardware.best_ms, in seconds)."""
    return best_ms(fn, repeats, warmup=1) / 1e3


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
    packed = onednn_linears(model)
    engines = {"seqlab": model, "seqlab_onednn": packed}
    settings = {"as in the bench": 0, "40 tokens forced": 40}
    ours: dict[tuple[str, str], float] = {}
    with torch.no_grad():  # seqlab first: CTranslate2's idle threads would slow whatever runs right after it
        for name, form in engines.items():
            for setting, forced in settings.items():
                cfg = DecodingConfig(method="beam", num_beams=args.beams, max_length=40, min_length=forced,
                                     renormalize_logits=True)  # as CTranslate2 bans (engines.ct2)
                ours[name, setting] = best_seconds(lambda cfg=cfg, form=form: generate(form, src, pad, cfg))
    with tempfile.TemporaryDirectory() as tmp:
        engine = CT2Engine(export_ctranslate2(model, None, Path(tmp) / "fp32", None), model, None, "float32")
        for setting, forced in settings.items():
            cfg = DecodingConfig(method="beam", num_beams=args.beams, max_length=40, min_length=forced,
                                 renormalize_logits=True)
            theirs = best_seconds(lambda cfg=cfg: engine.translate_ids(sources, cfg, 40))
            print(f"beam {args.beams}, {setting}: CTranslate2 {theirs:.3f} s; " + "; ".join(
                f"{name} {ours[name, setting]:.3f} s, at {theirs / ours[name, setting]:.2f}x its speed"
                for name in engines))
    cfg = DecodingConfig(method="beam", num_beams=args.beams, max_length=40, min_length=40)
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        generate(packed, src, pad, cfg)  # what is left once the products run on oneDNN
    by_name = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}
    total = sum(by_name.values())
    linear = by_name.get("mkldnn::_linear_pointwise", 0.0)
    attention = by_name.get("aten::bmm", 0.0) + by_name.get("aten::_softmax", 0.0)
    print(f"profiled seqlab_onednn run (40 forced): {total:.3f} s; linear layers {linear:.3f} s; attention "
          f"(bmm, softmax) {attention:.3f} s; everything else {total - linear - attention:.3f} s")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
