"""score(): per-token log-probs of given targets by teacher forcing."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from seqlab.model import Seq2SeqTransformer


@torch.no_grad()
def score(model: Seq2SeqTransformer, src_ids: Tensor, src_pad_mask: Tensor, tgt_ids: Tensor) -> Tensor:
    """(B, T) log p(y_t | y_<t, x) of target ids (BOS excluded, EOS included), 0 at padding.

    tgt_ids are the tokens to score, right-padded with PAD; the decoder input is
    BOS followed by all but the last of them.
    """
    was_training = model.training
    model.eval()
    try:
        bos = torch.full_like(tgt_ids[:, :1], model.cfg.bos_id)
        logits = model(src_ids, src_pad_mask, torch.cat([bos, tgt_ids[:, :-1]], dim=1)).float()
        logprobs = F.log_softmax(logits, dim=-1).gather(2, tgt_ids[:, :, None]).squeeze(2)
    finally:
        model.train(was_training)
    return logprobs.masked_fill(tgt_ids == model.cfg.pad_id, 0.0)
