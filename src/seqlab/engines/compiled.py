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

The products are chosen by their rows. A step of one row (greedy search of one source) takes each layer
shape's one-row product the way the engine, as it is made, measures fastest on the model's own weights,
compiled (model.one_row.tune_one_row, a few seconds: the model's own weight-left product, oneDNN's product on
the plain weight, or Inductor's own loop over the weight, model.products.REDUCTION), set in a copy of the
model's modules that shares its weights. Everything else (the encoder, a prompt, a step of beams or of a
batch) runs on a copy of the model whose linear layers hold oneDNN's packed weights (model.onednn), made with
the engine. Both programs are compiled with Inductor's freezing: the weights become the program's constants,
which Inductor's own oneDNN linear needs. At beam 5, one source a call on the AVX-512 EPYC of
docs/performance.md, the packed copy took a t5-small step from 14.9 to 9.0 ms and a GPT-2 step from 40.7 to
22.7.

`precision=int8` compiles the step of the model's int8 copy (model.quantize.dynamic_int8), for every number of
rows (a program for each number): its products are fbgemm's int8 kernels whatever the rows, so nothing is tuned
or packed, and the program keeps each whole (`seqlab::int8_linear`, the eager layer's own product) while it
fuses the work around them.
Its outputs are the eager int8 engine's up to rounding, which int8 can turn into another output: a rounding
difference that moves an activation across a quantization step moves it by a whole step. And an int8 product
quantizes its activations over all of its rows at once, so a row's numbers depend on the rows beside it, and
the static step computes a batch's finished rows too. On the bench's random models, whose words lie within
int8's error of each other, the compiled engine's outputs part from the eager int8 engine's in some rows, and
equal fp32's as often as the eager engine's do (docs/performance.md).

Compiling takes tens of seconds per model and process (Inductor's cache under the system's temporary folder
shortens later processes' compiles); the engine pays it at its first search, so it pays off for a long
session of calls (`seqlab translate` reading a stream, a server), not for one call. Outputs are seqlab's
search's up to rounding: the fused loops sum in their own order, and attention adds the masked positions'
exact zeros, so a near-tie can break the other way, as between any two kernels.
"""

from __future__ import annotations

import copy
import logging
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
from seqlab.model.one_row import ONE_ROW_MARGIN, tune_one_row
from seqlab.model.onednn import onednn_available, onednn_linears
from seqlab.model.quantize import dynamic_int8

log = logging.getLogger(__name__)

SETTING = "engine=seqlab_compiled"
PRECISIONS = ("fp32", "int8")  # what the compiled step computes in (bf16: engine=seqlab or seqlab_graphs)


Program = Callable[[Tensor, Tensor, StaticCache], Tensor]


def compile_step(model: Model, freeze: bool = False) -> Program:
    """`model.step_at` compiled whole, (rows,) last tokens -> (rows, V) fp32 logits (`fullgraph`: a break in it
    is an error, not a silent slow path). Static shapes (`dynamic=False`): a shape compiled as a symbol only where
    `CompiledStep` marks it, never because Dynamo saw it change (its automatic symbols put guards on the
    strides and offsets of views of one storage that it then cannot build on a fresh cache). `freeze`: the
    model's parameters and buffers become the program's constants (Inductor's freezing; it applies without
    gradients, as decoding runs), as oneDNN's packed linear layers need."""

    def step(tokens: Tensor, position: Tensor, cache: StaticCache) -> Tensor:
        return model.step_at(tokens[:, None], position, cache)[:, -1].float()

    # A code object of its own: Dynamo keeps its programs, and counts them against its recompile limit (8), per
    # code object, so the models of one process (a bench's five, a server's) would otherwise share one limit.
    step.__code__ = step.__code__.replace(co_name=f"compiled_step_{id(model):x}")
    program = torch.compile(step, fullgraph=True, dynamic=False)
    # Dynamo reads `freezing` as it traces (the parameters become graph constants), Inductor as it compiles; a
    # compile may come at any call (a new shape), so every call runs under it (~20 us a step).
    return torch._inductor.config.patch(freezing=True)(program) if freeze else program


def shared_copy(model: Model) -> Model:
    """A copy of the model's modules holding the model's own parameters and buffers (no second copy of the
    weights), for settings of its layers that must not change the caller's model."""
    return copy.deepcopy(model, {id(t): t for t in (*model.parameters(), *model.buffers())})


class CompiledStep(GraphedStep):
    """A StepFn (search.model_step's contract) that runs the static step through a compiled program: the
    graph engine's step without a graph (`capture=False`), its `_run` the compiled `step_at`.

    What changes from one search to the next is compiled as a symbol from the first search on: the source's
    (or prompt's) length and the buffers' capacity. The rows are compiled per number (greedy search's one
    source, beam search's beams), each by the program `program_for(rows)` gives (the engine's choice of products)."""

    def __init__(self, model: Model, program_for: Callable[[int], Program]) -> None:
        super().__init__(model, capture=False)
        self.program_for = program_for
        self.compiled = program_for(1)

    def _bind(self, cache: DecoderCache, rows: int) -> None:
        super()._bind(cache, rows)
        self.compiled = self.program_for(rows)
        static = self.cache
        torch._dynamo.maybe_mark_dynamic(static.slab, 3)  # capacity
        for k, v in static.cross_kv:
            torch._dynamo.maybe_mark_dynamic(k, 2)  # the source's length
            torch._dynamo.maybe_mark_dynamic(v, 2)
        torch._dynamo.maybe_mark_dynamic(static.cross_mask, 3)  # the source's or the prompt's length

    def _run(self) -> Tensor:
        return self.compiled(self.tokens, self.position, self.cache)


class CompiledEngine(BaseEngine):
    """seqlab's own search with its decoder step compiled once for this model (module docstring), on a CPU,
    checked before decoding. `precision=int8`: the search and its step on the model's int8 copy
    (model.quantize.dynamic_int8), whose products are fbgemm's int8 kernels at every number of rows, so
    nothing is tuned or packed: one program (per number of rows) fuses the work around them."""

    def __init__(self, model: Model, precision: str = "fp32") -> None:
        if next(model.parameters()).device.type != "cpu":
            raise ConfigError(f"{SETTING} compiles the step for a CPU; on a GPU use engine=seqlab_graphs")
        if precision not in PRECISIONS:
            raise ConfigError(f"{SETTING} compiles the fp32 or int8 step, not precision={precision}")
        check_graphable(model, SETTING)
        self.model = model
        self.packed: Program | None = None  # the copy's step, compiled at the first step of more than one row
        self.step = partial(CompiledStep, program_for=self.program_for)
        self.int8: dict[int, Program] | None = None  # int8: the int8 copy's program for each number of rows
        if precision == "int8":
            self.searched: Model = dynamic_int8(model)
            self.copy: Model | None = None
            self.int8 = {}
            self.own = self.program_for(1)
            return
        self.searched = model
        self.one_row = shared_copy(model)  # its one-row products tuned; the caller's model keeps its own
        speedups = tune_one_row(self.one_row)
        log.info("%s: one-row products' speedup over weight-left by layer shape and way (the fastest taken at "
                 "%sx or more): %s", SETTING, ONE_ROW_MARGIN,
                 {shape: {way: round(x, 2) for way, x in ways.items()} for shape, ways in speedups.items()})
        self.own = compile_step(self.one_row, freeze=True)
        # the model on oneDNN's packed weights (None where torch has none), for everything but one-row steps
        self.copy = onednn_linears(model) if onednn_available() else None

    def program_for(self, rows: int) -> Program:
        """One row: the model's own products; more: the packed copy's (module docstring). int8: a program of its
        own for each number of rows (a search meets two or three: Dynamo's limit of 8 compiles counts per program)."""
        if self.int8 is not None:
            if rows not in self.int8:
                self.int8[rows] = compile_step(self.searched, freeze=True)
            return self.int8[rows]
        if rows == 1 or self.copy is None:
            return self.own
        if self.packed is None:
            self.packed = compile_step(self.copy, freeze=True)
        return self.packed

    def decode(self, model: Model, batch: DecodeBatch) -> GenerateOutput:
        """The search on the packed copy (the encoder's and the prompt's products are of many rows), or the int8
        copy, its steps through `program_for`."""
        if model is not self.model:
            raise ValueError(f"{SETTING}: this engine compiled another model's step; make one per model")
        return search(self.copy or self.searched, batch, step=self.step)
