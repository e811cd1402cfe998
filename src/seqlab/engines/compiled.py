"""The decoder step compiled for a CPU: `engine=seqlab_compiled`.

Decoding one source a call on a CPU is bound by the host, not the arithmetic: a greedy step of t5-small's
shape runs ~800 PyTorch operators (views, norms, the attention's masks and reshapes, the cache's writes) around
its ~40 matrix products, and each costs microseconds of dispatch while the products read the weights in ~5 ms.
A CUDA graph removes that on a GPU (engines.graphs); on a CPU, `torch.compile` (TorchInductor) turns the
same static step into one generated program: the elementwise work fused into a few dozen C++ loops, the
products left to the BLAS, no Python between them. The static step is `step_at` (its position a tensor,
attention over the cache's whole capacity, the later positions masked), so the compiled program serves every
step of every search; shapes that change between calls (a source's or prompt's length, the rows) are compiled
as symbols once seen to change, not once per value.

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
from seqlab.model import Model

SETTING = "engine=seqlab_compiled"


def compile_step(model: Model) -> Callable[..., Tensor]:
    """`model.step_at` compiled whole (`fullgraph`: a break in it is an error, not a silent slow path)."""
    return torch.compile(model.step_at, fullgraph=True, dynamic=None)


class CompiledStep(GraphedStep):
    """A StepFn (search.model_step's contract) that runs the static step through a compiled program: the
    graph engine's step without a graph (`capture=False`), its `_run` the compiled `step_at`."""

    def __init__(self, model: Model, compiled: Callable[..., Tensor]) -> None:
        super().__init__(model, capture=False)
        self.compiled = compiled

    def _run(self) -> Tensor:
        return self.compiled(self.tokens[:, None], self.position, self.cache, self.rows)[:, -1].float()


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
