"""score(): per-token log-probs of given targets by teacher forcing."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from seqlab.decoding.prompts import split_prompt
from seqlab.model import Model


@torch.no_grad()
def score(model: Model, src_ids: Tensor, src_pad_mask: Tensor, tgt_ids: Tensor) -> Tensor:
    """(B, T) log p(y_t | y_<t, x) of target ids (BOS excluded, EOS included), 0 at padding.

    tgt_ids are the tokens to score, right-padded with PAD; the decoder input is
    BOS (a causal LM: its prompt's last token) followed by all but the last of them.
    """
    was_training = model.training
    model.eval()
    try:
        if model.cfg.start == "prompt":  # a causal LM: the prompt's last token comes first (decoding.prompts)
            src_ids, src_pad_mask, first = split_prompt(src_ids, src_pad_mask, model.cfg.pad_id)
            bos = first[:, None]
        else:
            bos = torch.full_like(tgt_ids[:, :1], model.cfg.bos_id)
        if model.cfg.one_stack:  # source (or prompt) and decoder inputs share the positions
            check_positions(src_pad_mask, tgt_ids != model.cfg.pad_id, model.cfg.max_positions)
        logits = model(src_ids, src_pad_mask, torch.cat([bos, tgt_ids[:, :-1]], dim=1)).float()
        logprobs = F.log_softmax(logits, dim=-1).gather(2, tgt_ids[:, :, None]).squeeze(2)
    finally:
        model.train(was_training)
    return logprobs.masked_fill(tgt_ids == model.cfg.pad_id, 0.0)


def check_positions(src_pad_mask: Tensor, real_targets: Tensor, max_positions: int) -> None:
    """Fail, naming the row, where a source and its target's decoder inputs (as many as its real target tokens)
    do not fit a one-stack model's positions together. src_pad_mask: (B, S) True at padding; real_targets: (B, T)."""
    fed = (~src_pad_mask).sum(dim=1) + real_targets.sum(dim=1)  # (B,)
    over = (fed > max_positions).nonzero()
    if over.numel():
        row = int(over[0])
        raise ValueError(f"row {row}: source and target take {int(fed[row])} positions together, more than "
                         f"model.max_positions={max_positions}; shorten them")
