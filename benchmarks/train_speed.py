"""Training speed on a corpus's own batches: `python benchmarks/train_speed.py CKPT [--steps 250] [--precision bf16]`.

Builds the checkpoint's data module (its corpus, tokenizer and token budget), takes the first
`--steps` training batches in the sampler's order, and runs seqlab's training step on them (forward,
label-smoothed loss, backward, AdamW) from a freshly initialised model of the checkpoint's shape.
Prints real (non-pad) tokens/s and page faults per step for each window of steps, with the thread count:
the faults show whether the heap has settled (memory reused step to step) or still grows. Unlike `make bench`, whose
batches are one fixed shape without padding, these are the token-budget batches a real run trains on:
their sizes, padding and shape changes included (docs/performance.md, "The real training loop").
"""

from __future__ import annotations

import argparse
import resource
import time

import torch

from seqlab.bench.speed import bench_optimizer, run_train_step, seqlab_train_step
from seqlab.checkpoint import load_for_inference
from seqlab.data import DataConfig
from seqlab.data.datamodule import Batch, Seq2SeqDataModule
from seqlab.memory import keep_freed_memory
from seqlab.model import Seq2SeqTransformer

PRECISIONS = {"fp32": "32", "bf16": "bf16-mixed"}  # this script's names -> the trainer's


def bench_batch(b: Batch) -> dict[str, torch.Tensor]:
    """A data-module batch in the bench's form (what `seqlab_train_step` reads)."""
    return {"src": b.src_ids, "pad": b.src_pad_mask, "tgt_in": b.tgt_in, "tgt": b.tgt_out}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("ckpt")
    parser.add_argument("--steps", type=int, default=250, help="training batches to run (the epoch repeats)")
    parser.add_argument("--window", type=int, default=50, help="steps per printed rate")
    parser.add_argument("--precision", choices=tuple(PRECISIONS), default="bf16")
    parser.add_argument("--label-smoothing", type=float, default=0.1)
    args = parser.parse_args(argv)
    keep_freed_memory()  # as the training pipeline does
    reference, _, info = load_for_inference(args.ckpt)
    data = Seq2SeqDataModule(DataConfig.from_dict(info.data_config))
    data.setup()
    epoch = [bench_batch(b) for b in data.train_dataloader()]
    if not epoch:
        raise SystemExit(f"{args.ckpt}: the corpus's training split gives no batches")
    batches = (epoch * -(-args.steps // len(epoch)))[: args.steps]
    torch.manual_seed(0)
    model = Seq2SeqTransformer(reference.cfg)
    model.train()
    step, opt = seqlab_train_step(model, args.label_smoothing), bench_optimizer(model)
    rates, faults, tokens, start, faulted = [], [], 0, time.perf_counter(), minor_faults()
    for i, b in enumerate(batches):
        tokens += run_train_step(step, opt, b, PRECISIONS[args.precision])
        if (i + 1) % args.window == 0:
            now, now_faulted = time.perf_counter(), minor_faults()
            rates.append(tokens / (now - start))
            faults.append((now_faulted - faulted) / args.window)
            tokens, start, faulted = 0, now, now_faulted
    shapes = {(tuple(b["src"].shape), tuple(b["tgt_in"].shape)) for b in batches}
    print(f"{args.precision} threads={torch.get_num_threads()} batches={len(batches)} shapes={len(shapes)} "
          f"tokens/s per {args.window} steps: {' / '.join(f'{r:,.0f}' for r in rates)}; "
          f"page faults per step: {' / '.join(f'{f:,.0f}' for f in faults)}")


def minor_faults() -> int:
    """Page faults this process has taken so far (first touches of memory new to it)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


if __name__ == "__main__":
    main()
