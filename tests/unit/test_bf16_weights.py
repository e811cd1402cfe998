"""`train.bf16_weights`: the step in bf16 on a bf16 copy of the weights, against the fp32 and bf16-autocast
steps; every product in bf16, the parameters fp32 master weights that stay tied."""

from __future__ import annotations

import pytest
import torch

from seqlab.config import ConfigError
from seqlab.model import ModelConfig, Seq2SeqTransformer
from seqlab.train.levers import bf16_weights, check_bf16_weights, step_loss

VARIANTS = {
    "tied": {},
    "untied_with_bias": {"tie_embeddings": "none", "output_bias": True},
    "t5_rescaled": {"tie_embeddings": "all", "rescale_output": True, "norm": "rmsnorm", "bias": False,
                    "activation": "gelu_tanh", "gated_ffn": True, "positions": "t5"},
    "pre_ln_rope": {"norm_position": "pre", "positions": "rope"},
    "learned_alibi_free": {"positions": "learned", "layernorm_embedding": True},
}


def model_and_batch(variant: str, seed: int = 0):
    cfg = ModelConfig(src_vocab_size=97, d_model=32, n_heads=4, d_ff=64, encoder_layers=2, decoder_layers=2,
                      dropout=0.0, **VARIANTS[variant])
    torch.manual_seed(seed)
    model = Seq2SeqTransformer(cfg)
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 97, (4, 9), generator=g)
    pad = torch.zeros_like(src, dtype=torch.bool)
    pad[1, 6:] = True
    tgt_in = torch.randint(4, 97, (4, 7), generator=g)
    tgt = torch.randint(4, 97, (4, 7), generator=g)
    tgt[2, 4:] = cfg.pad_id
    return model, (src, pad, tgt_in, tgt)


def loss_and_grads(model, batch, mode: str, fused: bool = False):
    """mode: fp32 | autocast (Lightning's bf16-mixed) | bf16_weights (the lever, inside the same autocast)."""
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode != "fp32"):
        loss, nll, n = step_loss(model, *batch, 0.1, fused=fused, bf16=mode == "bf16_weights")
    (loss / n).backward()
    return float(loss / n), float(nll / n), {name: p.grad.clone() for name, p in model.named_parameters()
                                              if p.grad is not None}


def relative_error(grads: dict, exact: dict) -> float:
    flat = torch.cat([grads[k].flatten() for k in exact])
    ref = torch.cat([exact[k].flatten() for k in exact])
    return float((flat - ref).norm() / ref.norm())


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("fused", [False, True])
def test_the_bf16_step_is_as_close_to_the_fp32_step_as_autocasts_order_of_rounding(variant, fused):
    """Computing in bf16 throughout (the residual stream, norms and gradients too) rounds more than autocast,
    which keeps norms and softmax in fp32: against the fp32 step, its gradient error is bounded by 3x
    autocast's (1.1x to 2.5x in these models), every parameter's gradient points the same way (cosine >=
    0.99) and the loss is within bf16 rounding."""
    model, batch = model_and_batch(variant)
    exact_loss, exact_nll, exact = loss_and_grads(model, batch, "fp32")
    _, _, mixed = loss_and_grads(model, batch, "autocast")
    loss, nll, ours = loss_and_grads(model, batch, "bf16_weights", fused=fused)
    assert loss == pytest.approx(exact_loss, rel=2e-3) and nll == pytest.approx(exact_nll, rel=2e-3)
    assert ours.keys() == exact.keys()
    assert all(g.dtype == torch.float32 for g in ours.values())  # back on the fp32 master weights
    assert relative_error(ours, exact) <= 3 * relative_error(mixed, exact)
    assert relative_error(ours, exact) < 0.08
    for name, g in exact.items():
        if g.norm() > 0:
            assert torch.nn.functional.cosine_similarity(ours[name].flatten(), g.flatten(), dim=0) > 0.99, name
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_every_product_of_the_bf16_step_is_in_bf16_and_the_copy_is_made_once():
    model, batch = model_and_batch("tied")
    seen: list[tuple[torch.dtype, torch.dtype]] = []
    hooks = [m.register_forward_pre_hook(lambda m, args: seen.append((args[0].dtype, m.weight.dtype)))
             for m in model.modules() if isinstance(m, torch.nn.Linear)]
    loss_and_grads(model, batch, "bf16_weights")
    for h in hooks:
        h.remove()
    assert seen and set(seen) == {(torch.bfloat16, torch.bfloat16)}
    with bf16_weights(model) as copies:
        pass
    # a tied matrix is one parameter, so one copy; its uses' gradients add up in the one fp32 parameter
    fp32 = {id(t) for t in [*model.parameters(), *model.buffers()] if t.dtype == torch.float32}
    assert copies.keys() == fp32 and all(c.dtype == torch.bfloat16 for c in copies.values())


def test_the_originals_are_back_tied_after_the_step_and_after_an_error():
    model, batch = model_and_batch("tied")
    before = {n: id(p) for n, p in model.named_parameters(remove_duplicate=False)}
    loss_and_grads(model, batch, "bf16_weights")
    with pytest.raises(RuntimeError, match="inside"), bf16_weights(model):
        assert model.output.weight.dtype == torch.bfloat16 and model.output.weight is model.src_embed.tokens.weight
        raise RuntimeError("inside")
    assert {n: id(p) for n, p in model.named_parameters(remove_duplicate=False)} == before
    assert model.output.weight is model.src_embed.tokens.weight and model.output.weight.dtype == torch.float32


def test_rope_keeps_its_fp64_frequencies():
    model, _ = model_and_batch("pre_ln_rope")
    kept = {n for n, b in model.named_buffers() if b.dtype == torch.float64}
    with bf16_weights(model) as copies:
        assert all(b.dtype == torch.float64 for n, b in model.named_buffers() if n in kept)
    assert kept and not {id(b) for n, b in model.named_buffers() if n in kept} & copies.keys()


@pytest.mark.parametrize("precision", ["32-true", "16-mixed", "bf16-true"])
def test_bf16_weights_needs_bf16_mixed(precision):
    check_bf16_weights(True, "bf16-mixed")
    check_bf16_weights(False, precision)
    with pytest.raises(ConfigError, match=rf"trainer.precision={precision}.*bf16-mixed"):
        check_bf16_weights(True, precision)
