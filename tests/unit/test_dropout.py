"""The 16-bit dropout (model/dropout.py) against PyTorch's: rate, expectation, gradient, determinism."""

from __future__ import annotations

import pytest
import torch

from seqlab.model.dropout import LEVELS, Dropout, dropout, keep_mask


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_drop_rate_is_p_in_every_16_bit_lane(p):
    """Each of the four 16-bit lanes of a 64-bit draw drops at rate k/65536; over 4M elements the
    observed rate is within 5 standard deviations of it (seeded: the same numbers every run)."""
    torch.manual_seed(0)
    mask, keep = keep_mask((1 << 22,), p, torch.device("cpu"))
    assert abs(keep - (1 - p)) <= 1 / (2 * LEVELS)
    sd = (keep * (1 - keep) / (1 << 20)) ** 0.5
    for lane in range(4):
        assert abs(mask[lane::4].float().mean().item() - keep) < 5 * sd


def test_expectation_and_gradient_match_pytorch_dropout():
    """Kept elements are scaled by exactly 1 / keep probability; the gradient is the same mask and scale;
    both dropouts leave the mean of a large tensor unchanged within sampling error."""
    torch.manual_seed(1)
    x = torch.randn(256, 1024, requires_grad=True)
    y = dropout(x, 0.1, True, "bits")
    kept = y != 0
    _, keep = keep_mask((1,), 0.1, x.device)
    assert torch.allclose(y[kept], x[kept] / keep)
    y.backward(torch.ones_like(y))
    assert torch.allclose(x.grad, kept.float() / keep)
    ones = torch.ones(1 << 20)
    for kernel in ("bits", "torch"):
        assert abs(dropout(ones, 0.1, True, kernel).mean().item() - 1.0) < 5 * (0.1 / 0.9 / (1 << 20)) ** 0.5


def test_identity_when_not_training_or_p_zero_and_all_dropped_at_p_one():
    x = torch.randn(4, 8)
    assert dropout(x, 0.3, False, "bits") is x
    assert dropout(x, 0.0, True, "bits") is x
    assert torch.equal(dropout(x, 1.0, True, "bits"), torch.zeros_like(x))
    module = Dropout(0.3, "bits").eval()
    assert module(x) is x


def test_masks_follow_torch_seed_and_bf16_keeps_its_dtype():
    x = torch.randn(64, 40, 256, dtype=torch.bfloat16)
    torch.manual_seed(7)
    a = dropout(x, 0.1, True, "bits")
    torch.manual_seed(7)
    b = dropout(x, 0.1, True, "bits")
    assert torch.equal(a, b) and a.dtype == torch.bfloat16
    assert not torch.equal(a, dropout(x, 0.1, True, "bits"))  # the next draw differs


def test_model_kernels_agree_without_dropout_and_both_train():
    """dropout_kernel changes only how masks are drawn: in eval mode the two models are identical."""
    from dataclasses import replace

    from seqlab.model import ModelConfig, Seq2SeqTransformer

    cfg = ModelConfig(src_vocab_size=40, d_model=16, n_heads=4, d_ff=32, encoder_layers=1, decoder_layers=1,
                      dropout=0.2, attention_dropout=0.1, activation_dropout=0.1, dropout_kernel="torch")
    torch.manual_seed(0)
    ref = Seq2SeqTransformer(cfg)
    bits = Seq2SeqTransformer(replace(cfg, dropout_kernel="bits"))
    bits.load_state_dict(ref.state_dict())
    src = torch.randint(4, 40, (3, 7))
    pad = torch.zeros_like(src, dtype=torch.bool)
    with torch.no_grad():
        assert torch.equal(ref.eval()(src, pad, src), bits.eval()(src, pad, src))
    bits.train()
    out = bits(src, pad, src)
    out.sum().backward()
    assert torch.isfinite(out).all() and all(p.grad is not None for p in bits.parameters() if p.requires_grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_masked_scale_equals_the_bool_product_bitwise(dtype):
    """Dropout's uint8-view product gives exactly `(x * mask).mul_(scale)`, forward and backward."""
    from seqlab.model.dropout import _MaskedScale

    torch.manual_seed(2)
    x = torch.randn(64, 40, 256).to(dtype).requires_grad_()
    mask, keep = keep_mask(x.shape, 0.1, x.device)
    y = _MaskedScale.apply(x, mask, 1.0 / keep)
    assert y.dtype == dtype and torch.equal(y, (x.detach() * mask).mul_(1.0 / keep))
    grad = torch.randn_like(y)
    y.backward(grad)
    assert torch.equal(x.grad, (grad * mask).mul_(1.0 / keep))
