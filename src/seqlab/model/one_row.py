"""Which way each layer shape takes a one-row product (model.products: weight-left or oneDNN), measured on the
model's own weights: what engine=seqlab_compiled sets, as it is made, for its one-row steps.

No rule by shape holds across shapes and CPUs (model.products: a weight four times taller than wide reads
faster through oneDNN on the AVX-512 EPYC, SmolLM-135M's 1536 -> 576 layer slower), so both ways are timed.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor, nn

from seqlab.hardware import best_of, timed
from seqlab.model.layers import FeedForward
from seqlab.model.onednn import onednn_available
from seqlab.model.products import ONEDNN, WEIGHT_LEFT, Linear, linear

ONE_ROW_MARGIN = 1.1  # oneDNN taken at this speedup or more: below it, the two are level within a run's spread


def one_row_layers(model: nn.Module) -> dict[tuple[int, int], list[Linear]]:
    """The model's layers that take a decoding step's rows through their own forward, by (in, out) shape (a
    gated feed-forward's first layer takes its two halves apart: layers.FeedForward.gate_and_up)."""
    halves = {id(m.fc1) for m in model.modules() if isinstance(m, FeedForward) and m.gated}
    shapes: dict[tuple[int, int], list[Linear]] = {}
    for m in model.modules():
        if isinstance(m, Linear) and id(m) not in halves:
            shapes.setdefault((m.in_features, m.out_features), []).append(m)
    return shapes


def one_row_through(layers: list[Linear], x: Tensor, way: str) -> tuple[list[Tensor], float]:
    """x through each layer in turn, the same row each time, `way`: (outputs, seconds)."""
    return timed(lambda: [linear(x, m.weight, m.bias, way) for m in layers])


def tune_one_row(model: nn.Module, repeats: int = 5, margin: float = ONE_ROW_MARGIN) -> dict[tuple[int, int], float]:
    """In place: each layer shape whose one-row product runs `margin` times or more faster through oneDNN than
    weight-left takes ONEDNN, the others WEIGHT_LEFT. Each way is timed on one row through all the model's
    layers of the shape in turn (so the weights come from memory, as in a step), the two ways alternating,
    the best of `repeats` after a warm-up (hardware.best_of). Returns each shape's speedup through oneDNN; an
    empty dict where this torch has no oneDNN."""
    if not onednn_available():
        return {}
    speedups = {}
    with torch.no_grad():
        for shape, layers in one_row_layers(model).items():
            x = torch.randn(1, shape[0], generator=torch.Generator().manual_seed(0))  # the global RNG left as it is
            ways = {way: partial(one_row_through, layers, x, way) for way in (WEIGHT_LEFT, ONEDNN)}
            for run in ways.values():
                run()
            best = best_of(ways, repeats)
            speedup = best[WEIGHT_LEFT][1] / best[ONEDNN][1]
            for m in layers:
                m.one_row = ONEDNN if speedup >= margin else WEIGHT_LEFT
            speedups[shape] = speedup
    return speedups
