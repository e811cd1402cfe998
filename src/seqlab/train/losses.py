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
        n, vocab = logits.shape
        lse = logits.new_empty(n, dtype=torch.float32)  # (N,)
        x_sum, x_target = torch.empty_like(lse), torch.empty_like(lse)
        for rows in row_blocks(n, vocab, logits.device):  # on a CPU each block's passes stay in its cache
            x = logits[rows].float()
            torch.logsumexp(x, dim=-1, out=lse[rows])
            torch.sum(x, dim=-1, out=x_sum[rows])
            x_target[rows] = x.gather(1, target[rows, None]).squeeze(1)
        nll = lse - x_target
        eps_i = epsilon / (vocab - 1)
        loss = (1.0 - epsilon - eps_i) * nll + eps_i * (vocab * lse - x_sum)
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
        scale, shift, at_target = g_loss + g_nll, g_loss * eps_i, g_loss * on_target + g_nll  # (N,) each
        grad = torch.empty_like(logits)  # (N, V), in the logits' dtype
        n, vocab = logits.shape
        direct = grad.dtype == torch.float32  # else each block is computed in fp32, then cast into grad
        for rows in row_blocks(n, vocab, logits.device):
            g = torch.sub(logits[rows].float(), lse[rows, None], out=grad[rows] if direct else None)
            g.exp_()  # softmax
            g.mul_(scale[rows, None]).sub_(shift[rows, None])
            g.scatter_add_(1, target[rows, None], -at_target[rows, None])
            if not direct:
                grad[rows] = g
        return grad, None, None, None


BLOCK_ELEMENTS = 1 << 19  # CPU: 2 MiB of fp32 per block of rows, the CPU's caches, shared by the threads
GPU_BLOCK_ELEMENTS = 1 << 26  # elsewhere: 256 MiB of fp32 temporaries per block, few enough launches


def row_blocks(n: int, vocab: int, device: torch.device | None = None) -> list[slice]:
    """Slices of about a block's elements over n rows of `vocab` columns, for logits on `device`.

    Why blocks on a CPU: the loss makes several passes over each (rows, V) block (max, exp, sums; in
    backward exp, scale, shift); over the whole (N, V) array each pass streams from memory, over a block
    that fits in cache only the first does. Why large ones elsewhere: a GPU pays a dozen kernel launches
    per block, and cache-sized blocks of a base model's batch (12k rows x 37k tokens: ~870 of them)
    would launch more kernels than the step has work; a large block only bounds the fp32 temporaries of
    bf16 logits. Rows are independent, so every blocking gives the whole-array result.
    """
    elements = BLOCK_ELEMENTS if device is None or device.type == "cpu" else GPU_BLOCK_ELEMENTS
    return slices(n, max(1, elements // vocab))


def slices(n: int, step: int) -> list[slice]:
    """n rows as consecutive slices of `step` rows (the last one shorter)."""
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float, pad_id: int = PAD_ID,
                       keep: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Summed label-smoothed loss and summed NLL over non-pad tokens (`keep`, shaped as target, where the
    padding's id cannot tell them), and the token count."""
    logits = logits.reshape(-1, logits.shape[-1])  # (N, V)
    target = target.reshape(-1)  # (N,)
    keep = target != pad_id if keep is None else keep.reshape(-1)
    loss, nll = _LabelSmoothedCE.apply(logits, target, keep, epsilon)
    return loss.sum(), nll.sum(), keep.sum()
