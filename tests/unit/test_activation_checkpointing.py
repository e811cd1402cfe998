"""Activation checkpointing per layer (train.activation_checkpointing): the plain step's loss and gradients,
dropout included (its masks are replayed in the recomputation), with fewer tensors kept for the backward;
decoding and copies of the model unchanged."""

from __future__ import annotations

import copy

import pytest
import torch

from seqlab.config import ConfigError
from seqlab.model import ModelConfig, build_model
from seqlab.train.config import TrainConfig
from seqlab.train.levers import checkpoint_layers, step_loss

SHAPES = {"encoder_decoder": dict(encoder_layers=2, decoder_layers=2),
          "decoder_only": dict(architecture="decoder_only", encoder_layers=0, decoder_layers=3),
          "prefix_lm": dict(architecture="prefix_lm", encoder_layers=0, decoder_layers=3, positions="rope")}


def batch(g: torch.Generator) -> tuple[torch.Tensor, ...]:
    src = torch.randint(4, 50, (4, 7), generator=g)
    pad = torch.zeros_like(src, dtype=torch.bool)
    pad[1, 5:] = True
    src[pad] = 0
    tgt = torch.randint(4, 50, (4, 6), generator=g)
    tgt_in = torch.cat([torch.full((4, 1), 1), tgt[:, :-1]], 1)
    return src, pad, tgt_in, tgt


def saved_bytes(run) -> int:
    """Bytes of the tensors autograd keeps for the backward while `run()` builds its graph (the outermost
    hooks see what a checkpointed layer keeps: its inputs, not its activations)."""
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run()
    return total, out


@pytest.mark.parametrize("shape", list(SHAPES))
def test_checkpointed_layers_give_the_plain_steps_gradients_and_keep_less(shape):
    torch.manual_seed(0)
    plain = build_model(ModelConfig(src_vocab_size=50, d_model=32, n_heads=4, d_ff=64, dropout=0.2,
                                    max_positions=64, **SHAPES[shape])).train()
    checkpointed = copy.deepcopy(plain)
    assert checkpoint_layers(checkpointed) == len(plain.encoder_layers) + len(plain.decoder_layers)
    src, pad, tgt_in, tgt = batch(torch.Generator().manual_seed(1))
    results = {}
    for name, model in (("plain", plain), ("checkpointed", checkpointed)):
        torch.manual_seed(3)  # the same dropout masks on both sides
        kept, (loss, _, _) = saved_bytes(lambda model=model: step_loss(model, src, pad, tgt_in, tgt, 0.1))
        loss.backward()
        results[name] = kept, loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    (kept_plain, loss_plain, grads_plain), (kept_ckpt, loss_ckpt, grads_ckpt) = results.values()
    assert torch.equal(loss_plain, loss_ckpt)
    assert grads_plain.keys() == grads_ckpt.keys()
    for name, grad in grads_plain.items():
        torch.testing.assert_close(grads_ckpt[name], grad, rtol=1e-5, atol=1e-6, msg=name)
    assert kept_ckpt < kept_plain / 2, (kept_ckpt, kept_plain)
    checkpointed.eval()
    plain.eval()
    with torch.no_grad():  # inference runs the plain forward
        assert torch.equal(checkpointed(src, pad, tgt_in), plain(src, pad, tgt_in))
    assert all(layer.checkpointed for layer in copy.deepcopy(checkpointed).decoder_layers)


def test_checkpointing_compiled_layers_is_refused_by_name():
    with pytest.raises(ConfigError, match="train.activation_checkpointing=true with train.compile=layers"):
        TrainConfig(activation_checkpointing=True, compile="layers")
