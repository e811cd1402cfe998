"""The decoder step compiled for a CPU: `engine=seqlab_compiled`.

Decoding one source a call on a CPU is bound by the host, not the arithmetic: a greedy step of t5-small's
shape runs ~800 PyTorch operators (views, norms, the attention's masks and reshapes, the cache's writes) around
its ~40 matrix products, and each costs microseconds of dispatch while the products read the weights in ~5 ms.
A CUDA graph removes that on a GPU (engines.graphs); on a CPU, `torch.compile` (TorchInductor) turns the
same static step into one generated program: the elementwise work fused into a few dozen C++ loops, the
products left to the BLAS, no Python between them. The static step is `step_at` (its position a tensor,
attention over the cache's whole capacity, the later positions masked), so the compiled program serves every
step of every search; the shapes that change between searches (a source's or prompt's length, the buffers'
capacity) are symbols from the first compile on, the rows (one source's beams) one program per number. Its
writes into the cache are in place (model.cache.StaticKV), so a step reads and writes only its own positions.

Compiling takes tens of seconds per model and process (Inductor's cache under the system's temporary folder
shortens later processes' compiles); the engine pays it at its first search, so it pays off for a long
session of calls (`seqlab translate` reading a stream, a server), not for one call. Outputs are seqlab's
search's up to rounding: the fused loops sum in their own order, and attention adds the masked positions'
exact zeros, so a near-tie can break the other way, as between any two kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor

from seqlab.config import ConfigError
from seqlab.decoding import GenerateOutput
from seqlab.decoding.engine import BaseEngine, DecodeBatch, search
from seqlab.engines.graphs import GraphedStep, check_graphable
from seqlab.model import DecoderCache, Model
from seqlab.model.cache import StaticCache

SETTING = "engine=seqlab_compiled"


def compile_step(model: Model) -> Callable[[Tensor, Tensor, StaticCache], Tensor]:
    """`model.step_at` compiled whole, (rows,) last tokens -> (rows, V) fp32 logits (`fullgraph`: a break in it
    is an error, not a silent slow path). Static shapes (`dynamic=False`): a shape compiled as a symbol only where
    `CompiledStep` marks it, never because Dynamo saw it change (its automatic symbols put guards on the
    strides and offsets of views of one storage that it then cannot build on a fresh cache)."""

    def step(tokens: Tensor, position: Tensor, cache: StaticCache) -> Tensor:
        return model.step_at(tokens[:, None], position, cache)[:, -1].float()

    # A code object of its own: Dynamo keeps its programs, and counts them against its recompile limit (8), per
    # code object, so the models of one process (a bench's five, a server's) would otherwise share one limit.
    step.__code__ = step.__code__.replace(co_name=f"compiled_step_{id(model):x}")
    return torch.compile(step, fullgraph=True, dynamic=False)


class CompiledStep(GraphedStep):
    """A StepFn (search.model_step's contract) that runs the static step through a compiled program: the
    graph engine's step without a graph (`capture=False`), its `_run` the compiled `step_at`.

    What changes from one search to the next is compiled as a symbol from the first search on: the source's
    (or prompt's) length and the buffers' capacity. The rows are compiled per number (greedy search's one
    source, beam search's beams): a product's kernel is chosen by its rows (model.products)."""

    def __init__(self, model: Model, compiled: Callable[[Tensor, Tensor, StaticCache], Tensor]) -> None:
        super().__init__(model, capture=False)
        self.compiled = compiled

    def _bind(self, cache: DecoderCache, rows: int) -> None:
        super()._bind(cache, rows)
        static = self.cache
        torch._dynamo.maybe_mark_dynamic(static.slab, 3)  # capacity
        for k, v in static.cross_kv:
            torch._dynamo.maybe_mark_dynamic(k, 2)  # the source's length
            torch._dynamo.maybe_mark_dynamic(v, 2)
        torch._dynamo.maybe_mark_dynamic(static.cross_mask, 3)  # the source's or the prompt's length

    def _run(self) -> Tensor:
        return self.compiled(self.tokens, self.position, self.cache)


class CompiledEngine(BaseEngine):
    """seqlab's own search with its decoder step compiled once for this model (module docstring); fp32 on a
    CPU, checked before decoding."""

    def __init__(self, model: Model) -> None:
        if next(model.parameters()).device.type != "cpu":
            raise ConfigError(f"{SETTING} compiles the step for a CPU; on a GPU use engine=seqlab_graphs")
        check_graphable(model, SETTING)
        self.step = partial(CompiledStep, compiled=compile_step(model))

    def decode(self, model: Model, batch: DecodeBatch) -> GenerateOutput:
        return search(model, batch, step=self.step)
