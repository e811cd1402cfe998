"""Which way each layer shape takes a one-row product (model.products: weight-left, oneDNN, or a reduction
of Inductor's), measured on the model's own weights: what engine=seqlab_compiled sets, as it is made, for its
one-row steps.

No rule by shape holds across shapes and CPUs (model.products: a weight four times taller than wide reads
faster through oneDNN on the AVX-512 EPYC, SmolLM-135M's 1536 -> 576 layer slower; Inductor's loop beats both
on most of GPT-2's layers and not on its output layer), so every way is timed.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor, nn

from seqlab.hardware import best_of, timed
from seqlab.model.onednn import onednn_available
from seqlab.model.products import ONEDNN, REDUCTION, WEIGHT_LEFT, Linear, linear

ONE_ROW_MARGIN = 1.05  # another way taken at this speedup over weight-left or more (below: level, within noise)


def one_row_layers(model: nn.Module) -> dict[tuple[int, int], list[Linear]]:
    """The model's layers that take a one-row step through their own forward, by (in, out) shape (a gated
    feed-forward's first layer too: one row takes it whole, layers.FeedForward.gate_and_up)."""
    shapes: dict[tuple[int, int], list[Linear]] = {}
    for m in model.modules():
        if isinstance(m, Linear):
            shapes.setdefault((m.in_features, m.out_features), []).append(m)
    return shapes


def through(layers: list[Linear], way: str) -> Callable[[Tensor], list[Tensor]]:
    """x -> x through each layer in turn, the same row each time, `way`, compiled as the engine's step is (with
    freezing: the weights the program's constants; REDUCTION is Inductor's loop only there, eagerly it would be
    weight-left), one program per call of this function (a code object of its own, so that one tuning's
    programs do not share Dynamo's recompile limit)."""
    held = nn.ModuleList(layers)  # the layers themselves, as modules: what freezing takes the weights from

    def run(x: Tensor) -> list[Tensor]:
        return [linear(x, m.weight, m.bias, way) for m in held]

    run.__code__ = run.__code__.replace(co_name=f"one_row_{way}_{layers[0].in_features}_{layers[0].out_features}")
    return torch._inductor.config.patch(freezing=True)(torch.compile(run, fullgraph=True, dynamic=False))


def one_row_ways() -> tuple[str, ...]:
    """The ways this torch can take: oneDNN's only where it has oneDNN."""
    return (WEIGHT_LEFT, ONEDNN, REDUCTION) if onednn_available() else (WEIGHT_LEFT, REDUCTION)


def tune_one_row(model: nn.Module, repeats: int = 20, margin: float = ONE_ROW_MARGIN
                 ) -> dict[tuple[int, int], dict[str, float]]:
    """In place: each layer shape takes the way whose one-row product ran fastest if that is `margin` times or
    more faster than weight-left, else WEIGHT_LEFT. Each way is timed on one row through all the model's
    layers of the shape in turn (so the weights come from memory, as in a step), the ways alternating, the best
    of `repeats` after a warm-up (hardware.best_of; the warm-up compiles). Returns each shape's
    speedup over weight-left by way."""
    speedups = {}
    with torch.no_grad():
        for shape, layers in one_row_layers(model).items():
            x = torch.randn(1, shape[0], generator=torch.Generator().manual_seed(0))  # the global RNG left as it is
            ways = {way: partial(timed, partial(through(layers, way), x)) for way in one_row_ways()}
            for run in ways.values():
                run()
            best = best_of(ways, repeats)
            speedup = {way: best[WEIGHT_LEFT][1] / s for way, (_, s) in best.items() if way != WEIGHT_LEFT}
            fastest = max(speedup, key=speedup.__getitem__)
            for m in layers:
                m.one_row = fastest if speedup[fastest] >= margin else WEIGHT_LEFT
            speedups[shape] = speedup
    return speedups
