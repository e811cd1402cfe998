"""Which way each layer shape takes one row (seqlab.model.one_row): the layers grouped by shape, and the tuning
that gives each shape the way timed fastest by the margin, every way's products the same."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from seqlab.model import ModelConfig, Seq2SeqTransformer, one_row
from seqlab.model.layers import FeedForward
from seqlab.model.one_row import ONE_ROW_MARGIN, one_row_layers, one_row_ways, tune_one_row
from seqlab.model.onednn import onednn_available
from seqlab.model.products import ONEDNN, REDUCTION, WEIGHT_LEFT


def gated_model() -> nn.Module:
    cfg = ModelConfig(src_vocab_size=40, d_model=16, n_heads=2, encoder_layers=1, decoder_layers=2, d_ff=24,
                      gated_ffn=True, max_positions=32)
    return Seq2SeqTransformer(cfg).eval()


def test_one_row_layers_are_grouped_by_shape_with_a_gated_first_layer_whole():
    model = gated_model()
    shapes = one_row_layers(model)
    gated = [m.fc1 for m in model.modules() if isinstance(m, FeedForward)]
    assert gated and {id(m) for m in gated} <= {id(m) for m in shapes[(16, 48)]}  # both halves, one weight
    assert (24, 16) in shapes and (16, 40) in shapes  # the feed-forward output layers, the output layer
    assert all((m.in_features, m.out_features) == shape for shape, layers in shapes.items() for m in layers)


def test_a_gated_feed_forward_takes_one_row_through_its_first_layers_tuned_way():
    """One row through a gated feed-forward: fc1 whole, the way fc1 is tuned to (the reduction, compiled),
    the same output as the two half products that more rows take; without the reduction's program it would
    not be the reduction (eagerly REDUCTION is weight-left)."""
    ffn = next(m for m in gated_model().modules() if isinstance(m, FeedForward))
    x = torch.randn(3, 1, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        rows = ffn(x)  # (3, 1, 16): three rows, the two half products
        ffn.fc1.one_row = REDUCTION
        alone = torch.compile(ffn, fullgraph=True)
        for i in range(3):
            torch.testing.assert_close(alone(x[i:i + 1]), rows[i:i + 1], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(ffn(x[i:i + 1]), rows[i:i + 1], rtol=1e-5, atol=1e-5)
        whole = []  # fc1's own forward runs (its tuned way) for one row only; more rows take its halves apart
        ffn.fc1.register_forward_hook(lambda module, args, out: whole.append(tuple(out.shape)))
        ffn(x[:1]), ffn(x)
    assert whole == [(1, 1, 48)]


def test_tuning_gives_each_shape_the_way_measured_fastest_by_the_margin(monkeypatch):
    """tune_one_row times each shape's layers every way this torch has (hardware.best_of; the reduction
    compiled), the products the same, and sets the fastest where it beats weight-left by ONE_ROW_MARGIN."""
    model = gated_model()
    shapes = one_row_layers(model)
    # each way's speedup over weight-left that the fake timer reports, by shape (1.0 where not named)
    fast = {(24, 16): {ONEDNN: 2.0, REDUCTION: 1.5}, (16, 40): {ONEDNN: 1.05, REDUCTION: 1.3},
            (16, 16): {REDUCTION: ONE_ROW_MARGIN * 0.99}, (16, 48): {REDUCTION: 1.2}}
    order = iter(shapes)  # tune_one_row times the shapes in one_row_layers' order

    def fake_best_of(ways, repeats):
        shape = next(order)
        assert set(ways) == set(one_row_ways())
        out = {way: run()[0] for way, run in ways.items()}  # each way runs: the products themselves are real
        for way, ys in out.items():
            assert [tuple(y.shape) for y in ys] == [(1, shape[1])] * len(shapes[shape])
            for a, b in zip(ys, out[WEIGHT_LEFT], strict=True):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=way)
        return {way: (None, 1.0 / fast.get(shape, {}).get(way, 1.0)) for way in ways}

    monkeypatch.setattr(one_row, "best_of", fake_best_of)
    speedups = tune_one_row(model)
    assert speedups.keys() == shapes.keys()
    for shape, layers in shapes.items():
        timed_ways = {way: x for way, x in fast.get(shape, {}).items() if way in one_row_ways()}
        fastest = max(timed_ways, key=timed_ways.__getitem__, default=WEIGHT_LEFT)
        want = fastest if timed_ways.get(fastest, 1.0) >= ONE_ROW_MARGIN else WEIGHT_LEFT
        assert {m.one_row for m in layers} == {want}, shape
    assert shapes[(16, 40)][0].one_row == REDUCTION and shapes[(16, 16)][0].one_row == WEIGHT_LEFT
    assert shapes[(16, 48)][0].one_row == REDUCTION  # the gated first layer, whole
    assert shapes[(24, 16)][0].one_row == (ONEDNN if onednn_available() else REDUCTION)
    x = torch.randn(1, 1, 24)
    with torch.no_grad():  # a tuned layer's forward takes its way's one row, the same product
        layer = shapes[(24, 16)][0]
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-6, atol=1e-6)
