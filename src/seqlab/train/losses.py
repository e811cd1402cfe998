"""Label-smoothed cross-entropy, fairseq's formula, without materializing log-softmax."""

from __future__ import annotations

import torch
from torch import Tensor

from seqlab.constants import PAD_ID


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float, pad_id: int = PAD_ID
                       ) -> tuple[Tensor, Tensor, Tensor]:
    """Summed loss and NLL over non-pad tokens, and the token count.

    fairseq: loss = (1 - eps - eps_i) * nll + eps_i * sum_v(-log p_v), eps_i = eps / (V - 1).
    With lse = logsumexp(x): nll = lse - x_y and sum_v(-log p_v) = V * lse - sum_v x_v,
    so only (N,) reductions are kept, never an (N, V) log-prob tensor. Computed in fp32.
    """
    logits = logits.reshape(-1, logits.shape[-1]).float()  # (N, V)
    target = target.reshape(-1)  # (N,)
    keep = target != pad_id
    logits, target = logits[keep], target[keep]
    vocab = logits.shape[-1]
    lse = torch.logsumexp(logits, dim=-1)  # (N,)
    nll = lse - logits.gather(1, target[:, None]).squeeze(1)
    smooth = vocab * lse - logits.sum(dim=-1)
    eps_i = epsilon / (vocab - 1)
    loss = (1.0 - epsilon - eps_i) * nll + eps_i * smooth
    return loss.sum(), nll.sum(), keep.sum()
