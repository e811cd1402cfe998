"""The graphed whole training step (train.graphs) without a graph: batches padded to their bucket train as the
batches themselves do, and the static step over several buckets follows the eager loop update for update. The
capture itself runs on a GPU (tests/integration/test_gpu.py)."""

from __future__ import annotations

import copy

import pytest
import torch

from seqlab.config import ConfigError
from seqlab.train.graphs import Buckets, GraphedTrainStep, pad_batch

from ..helpers import mean_loss, mixed_batch, summed_loss, tiny_model


def test_buckets_round_rows_and_lengths_up():
    b = mixed_batch(5, 11, 7, 0)
    assert Buckets(length=8, rows=4).shape(b) == (8, 16, 8)
    assert Buckets(length=1, rows=1).shape(b) == (5, 11, 7)
    with pytest.raises(ConfigError, match="buckets must be >= 1"):
        Buckets(length=0)


def test_a_batch_padded_to_its_bucket_has_the_same_loss_and_gradients():
    model = tiny_model()
    b = mixed_batch(5, 11, 7, 1)
    padded = pad_batch(b, (8, 16, 8))
    assert padded["src"].shape == (8, 16) and padded["tgt"].shape == (8, 8)
    results = []
    for batch in (b, padded):
        model.zero_grad()
        total, n = summed_loss(model, batch)
        (total / n).backward()
        results.append((float(total.detach()), int(n), [p.grad.clone() for p in model.parameters()]))
    (loss, n, grads), (loss_p, n_p, grads_p) = results
    assert n == n_p and loss == pytest.approx(loss_p, rel=1e-6)
    for g, g_p in zip(grads, grads_p, strict=True):
        torch.testing.assert_close(g, g_p, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("clip", [None, 0.5])
def test_the_static_step_follows_the_eager_loop_over_several_buckets(clip):
    """Six updates over batches of three bucket shapes: the same losses and the same weights after each, as
    the eager loop (zero, forward, backward, clip, update), within rounding. SGD with momentum: AdamW's first
    updates are the gradients' signs, which rounding flips where a gradient is near zero."""
    eager, static = tiny_model(), tiny_model()
    static.load_state_dict(eager.state_dict())
    batches = [mixed_batch(r, s, t, seed) for seed, (r, s, t) in enumerate(
        [(5, 11, 7), (6, 9, 8), (3, 20, 12), (8, 16, 8), (2, 19, 10), (3, 7, 5)])]

    def opt(m):
        return torch.optim.SGD(m.parameters(), lr=0.5, momentum=0.9)

    opt_eager = opt(eager)
    step = GraphedTrainStep(list(static.parameters()), mean_loss(static), opt(static), clip_norm=clip,
                            buckets=Buckets(length=8, rows=4), capture=False)
    for b in batches:
        opt_eager.zero_grad()
        loss = mean_loss(eager)(b)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(eager.parameters(), clip)
        opt_eager.step()
        got = step(copy.deepcopy(b))
        assert float(got) == pytest.approx(float(loss), rel=1e-5)
    for p, q in zip(eager.parameters(), static.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    assert sorted(step.static) == [(4, 8, 8), (4, 24, 16), (8, 16, 8)]


def test_capturing_needs_a_gpu():
    model = tiny_model()
    with pytest.raises(ConfigError, match="replays CUDA graphs: train on a GPU, or capture=False"):
        GraphedTrainStep(list(model.parameters()), mean_loss(model), torch.optim.AdamW(model.parameters()))
