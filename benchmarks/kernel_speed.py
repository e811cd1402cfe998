"""Kernels at the bench shape, one lever at a time, forward + backward, fp32 and bf16:
attention (PyTorch's fused SDPA against seqlab's matmul-softmax-matmul, with and without attention
dropout), dropout (PyTorch's F.dropout against seqlab's 16-bit masks, and those masks multiplied in as
bool, as seqlab did before) on the residual stream and the feed-forward activations, and one AdamW update
of the bench model's parameters (per-parameter loop, foreach, fused).

    python benchmarks/kernel_speed.py [--batch 64 --heads 4 --length 40 --head-dim 64 --repeats 20]

Prints three Markdown tables (milliseconds per forward + backward, best of `repeats`) and the CPU's flags.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from seqlab.bench.speed import BenchConfig
from seqlab.hardware import best_ms, cpu_description
from seqlab.memory import keep_freed_memory
from seqlab.model import Seq2SeqTransformer
from seqlab.model.dropout import dropout, keep_mask
from seqlab.model.layers import math_attention


def bool_product_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """The same 16-bit masks multiplied in as bool (autograd's backward multiplies by the bool mask too)."""
    mask, keep = keep_mask(x.shape, p, x.device)
    return x * mask * (1.0 / keep)


def adamw_table(repeats: int) -> None:
    """One AdamW update of the bench model's parameters (random gradients): loop, foreach, fused."""
    params = list(Seq2SeqTransformer(BenchConfig().model_config()).parameters())
    for p in params:
        p.grad = torch.randn_like(p)
    print(f"| AdamW update, {len(params)} tensors, {sum(p.numel() for p in params) / 1e6:.1f}M values "
          "| per-parameter loop (ms) | foreach (ms) | fused (ms) |")
    print("|---|---|---|---|")
    ms = [best_ms(torch.optim.AdamW(params, lr=1e-4, **kw).step, repeats)
          for kw in ({"foreach": False}, {"foreach": True}, {"fused": True})]
    print(f"| fp32 parameters | {ms[0]:.2f} | {ms[1]:.2f} | {ms[2]:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--length", type=int, default=40)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    keep_freed_memory()  # as every seqlab pipeline does: large blocks are not re-faulted at every call
    print(f"{cpu_description()}; threads: {torch.get_num_threads()}; torch {torch.__version__}")
    print("| dtype | attention dropout | fused SDPA (ms) | matmul-softmax-matmul (ms) | speed-up |")
    print("|---|---|---|---|---|")
    shape = (args.batch, args.heads, args.length, args.head_dim)
    mask = torch.ones(args.batch, 1, 1, args.length, dtype=torch.bool)
    mask[::2, :, :, args.length * 3 // 4:] = False  # padded sources in half the batch
    for dtype in (torch.float32, torch.bfloat16):
        qkv = tuple(torch.randn(shape, dtype=dtype, requires_grad=True) for _ in range(3))
        for p in (0.0, 0.1):
            fused = lambda p=p, qkv=qkv: F.scaled_dot_product_attention(  # noqa: E731
                *qkv, attn_mask=mask, dropout_p=p).sum().backward()
            plain = lambda p=p, qkv=qkv: math_attention(*qkv, mask, False, p, "torch").sum().backward()  # noqa: E731
            a, b = best_ms(fused, args.repeats), best_ms(plain, args.repeats)
            print(f"| {str(dtype).removeprefix('torch.')} | {p} | {a:.2f} | {b:.2f} | {a / b:.2f}x |")
    print()
    print("| dtype | dropout 0.1 on | F.dropout (ms) | 16-bit masks (ms) | speed-up | 16-bit masks as bool (ms) |")
    print("|---|---|---|---|---|---|")
    d_model = args.heads * args.head_dim
    for dtype in (torch.float32, torch.bfloat16):
        for what, width in (("residual stream", d_model), ("feed-forward activations", 4 * d_model)):
            x = torch.randn(args.batch, args.length, width, dtype=dtype, requires_grad=True)
            ms = [best_ms(lambda k=k, x=x: dropout(x, 0.1, True, k).sum().backward(), args.repeats)
                  for k in ("torch", "bits")]
            as_bool = best_ms(lambda x=x: bool_product_dropout(x, 0.1).sum().backward(), args.repeats)
            print(f"| {str(dtype).removeprefix('torch.')} | {what} {tuple(x.shape)} | {ms[0]:.2f} | {ms[1]:.2f} "
                  f"| {ms[0] / ms[1]:.2f}x | {as_bool:.2f} |")
    print()
    adamw_table(args.repeats)


if __name__ == "__main__":
    main()
