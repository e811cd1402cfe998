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
from seqlab.train import losses
from seqlab.train.losses import GPU_BLOCK_ELEMENTS

# Each block's projection reads the whole (V, d) output weight, forward and backward: cache-sized blocks of a
# large vocabulary (2 rows at 250k) read it once per row or two. In fp32 on the 2-core AVX-512 EPYC, 128 rows
# through mBART's frozen 250k x 1024 output layer took 15.4 s in blocks of 2 rows, 1.4 s in 64-row and 1.3 s
# in 128-row blocks (the unfused loss 1.3 s); at opus-mt's 58k x 512, 944, 319 and 275 ms (unfused 248)
# (`python benchmarks/fused_loss_blocks.py`). The fused loss is for memory, not for speed, on a CPU in fp32.
CPU_MIN_ROWS = 128


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
            # each gradient only where its input takes one: a frozen output layer (LoRA) has no (V, d) fp32
            # gradient to allocate and add to once a block, which at a 250k vocabulary is most of the step
            need_h, need_w, need_b = (grad_enabled and need for need in ctx.needs_input_grad[:3])
            want_grad = need_h or need_w or need_b
            loss_sum = h.new_zeros((), dtype=torch.float32)
            nll_sum = h.new_zeros((), dtype=torch.float32)
            grad_h = torch.empty_like(h) if need_h else None  # (N, d)
            grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=device) if need_w else None
            grad_b = torch.zeros(vocab, dtype=torch.float32, device=device) if need_b and bias is not None else None
            block = compiled_block() if compiled else block_loss
            for rows in blocks(n, vocab, device):
                hb = h[rows].to(dtype)  # (n_b, d)
                loss_b, nll_b, g = block(F.linear(hb, w, b), target[rows], keep[rows], on_target, eps_i,
                                         want_grad)
                loss_sum += loss_b
                nll_sum += nll_b
                if g is None:
                    continue
                if grad_h is not None:
                    grad_h[rows] = (g @ w).to(h.dtype)
                if grad_w is not None and dtype == torch.float32:
                    grad_w.addmm_(g.t(), hb)  # (V, d)
                elif grad_w is not None:
                    grad_w += torch.mm(g.t(), hb).float()
                if grad_b is not None:
                    grad_b += g.float().sum(0)
        grads = (grad_h, grad_w, grad_b)
        ctx.save_for_backward(*(g for g in grads if g is not None))
        dtypes = (h.dtype, weight.dtype, None if bias is None else bias.dtype)
        ctx.layout = [(g is not None, dtype) for g, dtype in zip(grads, dtypes, strict=True)]
        ctx.mark_non_differentiable(nll_sum)
        return loss_sum, nll_sum

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor | None) -> tuple[Tensor | None, ...]:
        saved = iter(ctx.saved_tensors)
        grads = [(next(saved) * grad_loss).to(dtype) if kept else None for kept, dtype in ctx.layout]
        return *grads, None, None, None, None, None


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
    """The loss's row blocks: on a CPU cache-sized (losses.BLOCK_ELEMENTS) but of CPU_MIN_ROWS rows at least;
    on a GPU about GPU_BLOCK_ELEMENTS, but at least four, so that the fp32 temporaries of one block stay a
    fraction of the unfused logits."""
    if device.type == "cpu":
        step = max(CPU_MIN_ROWS, losses.BLOCK_ELEMENTS // vocab)
    else:
        step = max(1, min(GPU_BLOCK_ELEMENTS // vocab, -(-n // 4)))
    return losses.slices(n, step)


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
