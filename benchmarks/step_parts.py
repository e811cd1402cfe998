"""Where a training step's time goes, at the bench shape: the step's matrix products each timed alone, the
forward pass by module, the backward pass by autograd node.

    python benchmarks/step_parts.py [--precision bf16-mixed|32-true] [--steps 8]

Why three views: `torch.profiler` charged page faults and its own overhead to whichever operator came
first (docs/performance.md), so this times the parts directly with `perf_counter`. Module and node times
nest (an attention block includes its projections); the matrix products alone give the floor that no
change outside them can lower. Prints Markdown tables and the CPU's flags.
"""

from __future__ import annotations

import argparse
import collections
import time

import torch

from seqlab.bench.speed import BenchConfig, bench_optimizer, random_batch, run_train_step, seqlab_train_step
from seqlab.hardware import best_ms, cpu_description
from seqlab.memory import keep_freed_memory
from seqlab.model import Seq2SeqTransformer


def linear_shapes(model: torch.nn.Module) -> collections.Counter:
    """(in, out) of every linear layer, counted; the output layer is the tied embedding's (vocab, d)."""
    return collections.Counter(tuple(m.weight.shape[::-1]) for m in model.modules() if isinstance(m, torch.nn.Linear))


def gemm_floor(model: torch.nn.Module, rows: int, dtype: torch.dtype, repeats: int) -> tuple[float, float]:
    """Forward and backward milliseconds of the step's linear layers' products, each shape timed alone
    (forward x W^T + b; backward dX = G W and dW = G^T X)."""
    fwd = bwd = 0.0
    for (k, m), count in linear_shapes(model).items():
        x, w, g, b = (torch.randn(*s, dtype=dtype) for s in ((rows, k), (m, k), (rows, m), (m,)))
        fwd += count * best_ms(lambda x=x, w=w, b=b: torch.addmm(b, x, w.t()), repeats)
        bwd += count * (best_ms(lambda g=g, w=w: g @ w, repeats) + best_ms(lambda g=g, x=x: g.t() @ x, repeats))
    return fwd, bwd


def timed_modules(model: torch.nn.Module, acc: dict[str, float]) -> None:
    """Add each module's forward time to acc[its class name] (nested modules counted in each)."""
    starts: dict[int, float] = {}
    for module in model.modules():
        name = type(module).__name__
        if name in ("Seq2SeqTransformer", "ModuleList", "Encoder", "Decoder"):
            continue
        module.register_forward_pre_hook(lambda m, *_: starts.__setitem__(id(m), time.perf_counter()))
        module.register_forward_hook(
            lambda m, *_, name=name: acc.__setitem__(name, acc[name] + time.perf_counter() - starts[id(m)]))


def timed_nodes(root: torch.autograd.graph.Node, acc: dict[str, float]) -> None:
    """Add each autograd node's backward time to acc[its name]."""
    start, seen, stack = [0.0], set(), [root]

    def finished(name: str):  # the engine runs one node at a time on CPU: the last start is this node's
        return lambda *_: acc.__setitem__(name, acc[name] + time.perf_counter() - start[0])

    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        node.register_prehook(lambda *_: start.__setitem__(0, time.perf_counter()))
        node.register_hook(finished(node.name()))
        stack.extend(next_node for next_node, _ in node.next_functions)


def table(title: str, acc: dict[str, float], steps: int, rows: int = 12) -> None:
    print(f"| {title} | ms per step |\n|---|---|")
    for name, seconds in sorted(acc.items(), key=lambda kv: -kv[1])[:rows]:
        print(f"| {name} | {seconds / steps * 1e3:.1f} |")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", default="bf16-mixed", choices=["bf16-mixed", "32-true"])
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    keep_freed_memory()
    print(f"{cpu_description()}; threads: {torch.get_num_threads()}; torch {torch.__version__}; {args.precision}\n")
    cfg = BenchConfig()
    torch.manual_seed(cfg.seed)
    model = Seq2SeqTransformer(cfg.model_config()).train()
    batch = random_batch(cfg, torch.Generator().manual_seed(cfg.seed))
    step, opt = seqlab_train_step(model, cfg.label_smoothing), bench_optimizer(model)
    whole = best_ms(lambda: run_train_step(step, opt, batch, args.precision), args.steps)  # after 3 warm-up steps
    dtype = torch.bfloat16 if args.precision == "bf16-mixed" else torch.float32
    fwd_gemm, bwd_gemm = gemm_floor(model, cfg.batch * cfg.seq_len, dtype, 10)
    print(f"step (best of {args.steps}): {whole:.1f} ms; its linear layers' products timed alone: forward "
          f"{fwd_gemm:.1f} ms, backward {bwd_gemm:.1f} ms\n")
    forward, backward = collections.defaultdict(float), collections.defaultdict(float)
    timed_modules(model, forward)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16-mixed")
    for _ in range(args.steps):
        with autocast:
            start = time.perf_counter()
            loss = step(batch)
            forward["forward and loss, whole"] += time.perf_counter() - start
        timed_nodes(loss.grad_fn, backward)
        start = time.perf_counter()
        loss.backward()
        backward["backward, whole"] += time.perf_counter() - start
        opt.zero_grad(set_to_none=True)
    table("forward, by module (nested)", forward, args.steps)
    table("backward, by autograd node", backward, args.steps)


if __name__ == "__main__":
    main()
