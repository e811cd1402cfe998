"""The output projection fused with the label-smoothed loss: logits made and used a block of rows at a time.

Why: a Transformer-base batch (192 x 64 target tokens, 37k vocabulary) has 0.45 G logits. Unfused, the step
writes them (bf16 under autocast), the loss reads them in fp32 blocks, backward writes their gradient and
the projection's backward reads it twice: several passes of 0.9-1.8 GB each, at memory speed, plus the
casts. Here each block of rows goes from hidden states to logits to loss to the logits' gradient while
the block is hot, and that gradient goes at once into the hidden states' and the weight's gradients; no
(N, V) array is ever whole. The gradients are computed in the forward pass (the loss is a sum, so the
upstream gradient is one scalar, applied in backward), as Liger-Kernel's fused linear cross-entropy does;
under no_grad (validation) none are computed.

The values are the unfused path's (`seqlab.train.losses`, fairseq's formula) up to rounding: the weight's
gradient is summed over blocks in fp32, where the unfused projection sums it in one product.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from seqlab.constants import PAD_ID
from seqlab.train.losses import GPU_BLOCK_ELEMENTS, row_blocks


class _LinearLabelSmoothedCE(torch.autograd.Function):
    """Summed loss and summed NLL of (h @ W^T + b) against targets; pad rows count zero."""

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, keep: Tensor,
                epsilon: float, grad_enabled: bool, compiled: bool) -> tuple[Tensor, Tensor]:
        device = h.device
        autocast = torch.is_autocast_enabled(device.type)
        dtype = torch.get_autocast_dtype(device.type) if autocast else h.dtype
        with torch.autocast(device.type, enabled=False):
            w = weight.to(dtype)  # (V, d), cast once per step
            b = bias.to(dtype) if bias is not None else None
            n, vocab = h.shape[0], weight.shape[0]
            eps_i = epsilon / (vocab - 1)
            on_target = 1.0 - epsilon - eps_i
            # inside forward grad mode is off, and needs_input_grad ignores it: the caller says (validation: no)
            want_grad = grad_enabled and any(ctx.needs_input_grad[:3])
            loss_sum = h.new_zeros((), dtype=torch.float32)
            nll_sum = h.new_zeros((), dtype=torch.float32)
            grad_h = torch.empty_like(h) if want_grad else None  # (N, d)
            grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=device) if want_grad else None
            grad_b = torch.zeros(vocab, dtype=torch.float32, device=device) if want_grad and bias is not None \
                else None
            block = compiled_block() if compiled else block_loss
            for rows in blocks(n, vocab, device):
                hb = h[rows].to(dtype)  # (n_b, d)
                loss_b, nll_b, g = block(F.linear(hb, w, b), target[rows], keep[rows], on_target, eps_i,
                                         want_grad)
                loss_sum += loss_b
                nll_sum += nll_b
                if g is None:
                    continue
                grad_h[rows] = (g @ w).to(h.dtype)
                if dtype == torch.float32:
                    grad_w.addmm_(g.t(), hb)  # (V, d)
                else:
                    grad_w += torch.mm(g.t(), hb).float()
                if grad_b is not None:
                    grad_b += g.float().sum(0)
        ctx.save_for_backward(*(t for t in (grad_h, grad_w, grad_b) if t is not None))
        ctx.layout = (grad_h is not None, grad_b is not None, weight.dtype, None if bias is None else bias.dtype)
        ctx.mark_non_differentiable(nll_sum)
        return loss_sum, nll_sum

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor | None) -> tuple[Tensor | None, ...]:
        has_grad, has_bias, w_dtype, b_dtype = ctx.layout
        if not has_grad:
            return None, None, None, None, None, None, None, None
        saved = list(ctx.saved_tensors)
        grad_h, grad_w = saved[0] * grad_loss, (saved[1] * grad_loss).to(w_dtype)
        grad_b = (saved[2] * grad_loss).to(b_dtype) if has_bias else None
        return grad_h, grad_w, grad_b, None, None, None, None, None


def block_loss(logits: Tensor, target: Tensor, keep: Tensor, on_target: float, eps_i: float, want_grad: bool,
               inplace: bool = True) -> tuple[Tensor, Tensor, Tensor | None]:  # (n_b, V), (n_b,), (n_b,) bool
    """One block of rows: its summed label-smoothed loss and NLL from its logits (n_b, V), and with `want_grad`
    the logits' gradient in the logits' dtype, d loss / dx = keep * (softmax(x) - on_target * onehot(y) -
    eps_i), as the unfused backward computes it. `inplace` reuses the fp32 logits' memory for the gradient
    (eager); compiled, the arithmetic is written out of place and the compiler fuses it into a few passes."""
    x = logits.float()  # (n_b, V)
    vocab = x.shape[-1]
    lse = torch.logsumexp(x, dim=-1)  # (n_b,)
    nll = lse - x.gather(1, target[:, None]).squeeze(1)
    loss = on_target * nll + eps_i * (vocab * lse - x.sum(-1))
    k = keep.float()  # (n_b,): 1 for a counted token
    loss_sum, nll_sum = (loss * k).sum(), (nll * k).sum()
    if not want_grad:
        return loss_sum, nll_sum, None
    if inplace:  # eager: the gradient overwrites the fp32 logits
        g = x.sub_(lse[:, None]).exp_().mul_(k[:, None]).sub_((k * eps_i)[:, None])
        g.scatter_add_(1, target[:, None], -(k * on_target)[:, None])
    else:  # compiled: out of place, which the compiler fuses
        g = (x - lse[:, None]).exp() * k[:, None] - (k * eps_i)[:, None]
        g = g.scatter_add(1, target[:, None], -(k * on_target)[:, None])
    return loss_sum, nll_sum, g.to(logits.dtype)


@functools.cache
def compiled_block() -> Callable[..., tuple[Tensor, Tensor, Tensor | None]]:
    """`block_loss` compiled once per process (`train.compile=loss`): on a GPU its reductions, exponentials and
    the gradient's casts become a few fused kernels instead of one pass over the block's logits each."""
    return torch.compile(functools.partial(block_loss, inplace=False), dynamic=None)


def blocks(n: int, vocab: int, device: torch.device) -> list[slice]:
    """The loss's row blocks (`row_blocks`): cache-sized on a CPU; on a GPU about GPU_BLOCK_ELEMENTS, but at
    least four, so that the fp32 temporaries of one block stay a fraction of the unfused logits."""
    if device.type == "cpu":
        return row_blocks(n, vocab, device)
    step = max(1, min(GPU_BLOCK_ELEMENTS // vocab, -(-n // 4)))
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


def fused_label_smoothed_nll(h: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, epsilon: float,
                             pad_id: int = PAD_ID, compiled: bool = False, keep: Tensor | None = None
                             ) -> tuple[Tensor, Tensor, Tensor]:
    """`label_smoothed_nll(F.linear(h, weight, bias), target, ...)` without the (N, V) logits: summed
    label-smoothed loss, summed NLL (not differentiable) and the token count. h: (B, T, d) or (N, d), the
    output layer's input; weight: (V, d); target: (B, T) or (N,); `compiled`: each block's arithmetic after
    the projection through torch.compile (`compiled_block`)."""
    h = h.reshape(-1, h.shape[-1])  # (N, d)
    target = target.reshape(-1)  # (N,)
    keep = target != pad_id if keep is None else keep.reshape(-1)
    loss, nll = _LinearLabelSmoothedCE.apply(h, weight, bias, target, keep, epsilon, torch.is_grad_enabled(),
                                             compiled)
    return loss, nll, keep.sum()
