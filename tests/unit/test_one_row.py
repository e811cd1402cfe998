"""Which way each layer shape takes one row (seqlab.model.one_row): the layers grouped by shape, and the tuning
that gives oneDNN the shapes timed faster by the margin, the two ways' products the same."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from seqlab.model import ModelConfig, Seq2SeqTransformer, one_row
from seqlab.model.layers import FeedForward
from seqlab.model.one_row import ONE_ROW_MARGIN, one_row_layers, tune_one_row
from seqlab.model.products import ONEDNN, WEIGHT_LEFT

from ..helpers import needs_onednn


def gated_model() -> nn.Module:
    cfg = ModelConfig(src_vocab_size=40, d_model=16, n_heads=2, encoder_layers=1, decoder_layers=2, d_ff=24,
                      gated_ffn=True, max_positions=32)
    return Seq2SeqTransformer(cfg).eval()


def test_one_row_layers_are_grouped_by_shape_without_a_gated_first_layer():
    model = gated_model()
    shapes = one_row_layers(model)
    gated = {id(m.fc1) for m in model.modules() if isinstance(m, FeedForward)}
    assert gated and not any(id(m) in gated for layers in shapes.values() for m in layers)
    assert (24, 16) in shapes and (16, 40) in shapes  # the feed-forward output layers, the output layer
    assert all((m.in_features, m.out_features) == shape for shape, layers in shapes.items() for m in layers)


@needs_onednn
def test_tuning_gives_onednn_to_the_shapes_measured_faster_by_the_margin(monkeypatch):
    """tune_one_row times each shape's layers both ways (hardware.best_of) and sets the faster by ONE_ROW_MARGIN."""
    model = gated_model()
    shapes = one_row_layers(model)
    fast = {(24, 16): 2.0, (16, 40): ONE_ROW_MARGIN * 0.99}  # oneDNN's speedup the fake timer reports
    order = iter(shapes)  # tune_one_row times the shapes in one_row_layers' order

    def fake_best_of(ways, repeats):
        shape = next(order)
        out = {way: run()[0] for way, run in ways.items()}  # each way runs: the products themselves are real
        assert [tuple(y.shape) for y in out[ONEDNN]] == [(1, shape[1])] * len(shapes[shape])
        for a, b in zip(out[ONEDNN], out[WEIGHT_LEFT], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
        return {WEIGHT_LEFT: (None, fast.get(shape, 1.0)), ONEDNN: (None, 1.0)}

    monkeypatch.setattr(one_row, "best_of", fake_best_of)
    speedups = tune_one_row(model)
    assert speedups.keys() == shapes.keys()
    for shape, layers in shapes.items():
        want = ONEDNN if fast.get(shape, 1.0) >= ONE_ROW_MARGIN else WEIGHT_LEFT
        assert {m.one_row for m in layers} == {want}, shape
    assert shapes[(24, 16)][0].one_row == ONEDNN and shapes[(16, 40)][0].one_row == WEIGHT_LEFT
    x = torch.randn(1, 1, 24)
    with torch.no_grad():  # a tuned layer's forward takes oneDNN's one row, the same product
        layer = shapes[(24, 16)][0]
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-6, atol=1e-6)
