"""Label-smoothed cross-entropy, fairseq's formula, fused into one autograd function."""

from __future__ import annotations

import torch
from torch import Tensor

from seqlab.constants import PAD_ID


class _LabelSmoothedCE(torch.autograd.Function):
    """Per-token loss and NLL of logits (N, V) against targets (N,), pad positions zero.

    fairseq: loss = (1 - eps - eps_i) * nll + eps_i * sum_v(-log p_v), eps_i = eps / (V - 1).
    With lse = logsumexp(x): nll = lse - x_y and sum_v(-log p_v) = V * lse - sum_v x_v.
    The gradient has the closed form softmax(x) - (1 - eps - eps_i) * onehot(y) - eps_i
    (its coefficients sum to one), so backward needs one (N, V) buffer and no log-softmax.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, keep: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
        x = logits.float()
        vocab = x.shape[-1]
        lse = torch.logsumexp(x, dim=-1)  # (N,)
        nll = lse - x.gather(1, target[:, None]).squeeze(1)
        eps_i = epsilon / (vocab - 1)
        loss = (1.0 - epsilon - eps_i) * nll + eps_i * (vocab * lse - x.sum(dim=-1))
        ctx.save_for_backward(logits, target, keep, lse)
        ctx.coef = (1.0 - epsilon - eps_i, eps_i)
        weight = keep.float()
        return loss * weight, nll * weight

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor) -> tuple[Tensor | None, ...]:
        logits, target, keep, lse = ctx.saved_tensors
        on_target, eps_i = ctx.coef
        # d nll / dx = softmax - onehot, for callers that differentiate the NLL too.
        g_loss = grad_loss * keep  # (N,)
        g_nll = grad_nll * keep if grad_nll is not None else torch.zeros_like(g_loss)
        grad = logits.float() - lse[:, None]  # (N, V), a new tensor: logits stay intact
        grad.exp_()  # softmax, in place: one (N, V) buffer fewer to allocate and fault in per step
        grad.mul_((g_loss + g_nll)[:, None])
        grad.sub_((g_loss * eps_i)[:, None])
        rows = torch.arange(len(target), device=target.device)
        grad[rows, target] -= g_loss * on_target + g_nll
        return grad.to(logits.dtype), None, None, None


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float, pad_id: int = PAD_ID
                       ) -> tuple[Tensor, Tensor, Tensor]:
    """Summed label-smoothed loss and summed NLL over non-pad tokens, and the token count."""
    logits = logits.reshape(-1, logits.shape[-1])  # (N, V)
    target = target.reshape(-1)  # (N,)
    keep = target != pad_id
    loss, nll = _LabelSmoothedCE.apply(logits, target, keep, epsilon)
    return loss.sum(), nll.sum(), keep.sum()
