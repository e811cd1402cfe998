"""score(): per-token log-probs of given targets by teacher forcing."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from seqlab.decoding.search import ends
from seqlab.model import DecodingModel, ModelConfig


@torch.no_grad()
def score(model: DecodingModel, src_ids: Tensor, src_pad_mask: Tensor, tgt_ids: Tensor,
          lengths: Tensor | None = None) -> Tensor:
    """(B, T) log p(y_t | y_<t, x) of target ids (BOS excluded, EOS included), 0 past each row's length.

    tgt_ids are the tokens to score, right-padded; the decoder input is BOS (a causal LM: its prompt's last
    token) followed by all but the last of them. lengths (B,): each row's real tokens, its end token
    included; None: `target_lengths` (a row ends at its first end token). A row is never cut by its padding's
    id: a causal LM without a pad token pads with its EOS, whose log-prob counts.
    """
    lengths = target_lengths(tgt_ids, model.cfg) if lengths is None else lengths.to(tgt_ids.device)
    was_training = model.training
    model.eval()
    try:
        layout = model.cfg.layout
        src_ids, src_pad_mask, first = layout.split(src_ids, src_pad_mask, model.cfg.pad_id)
        # the first decoder input: a causal LM's prompt's last token, else the decoder start token
        bos = torch.full_like(tgt_ids[:, :1], model.cfg.bos_id) if first is None else first[:, None]
        if layout.one_sequence:  # source (or prompt) and decoder inputs share the positions
            check_positions(src_pad_mask, lengths, model.cfg.max_positions)
        logits = model(src_ids, src_pad_mask, torch.cat([bos, tgt_ids[:, :-1]], dim=1)).float()
        logprobs = F.log_softmax(logits, dim=-1).gather(2, tgt_ids[:, :, None]).squeeze(2)
    finally:
        model.train(was_training)
    past = torch.arange(tgt_ids.shape[1], device=tgt_ids.device)[None, :] >= lengths[:, None]  # (B, T)
    return logprobs.masked_fill(past, 0.0)


def target_lengths(tgt_ids: Tensor, cfg: ModelConfig) -> Tensor:
    """(B,) the real tokens of right-padded targets: up to and including the first end token (generation stops
    there), and, where the padding id is not an end token, before the first padding."""
    t = tgt_ids.shape[1]
    at = torch.arange(t, device=tgt_ids.device)[None, :]
    stop = torch.where(ends(tgt_ids, cfg), at + 1, t)  # (B, T)
    if cfg.pad_id not in cfg.end_ids:
        stop = torch.minimum(stop, torch.where(tgt_ids == cfg.pad_id, at, t))
    return stop.min(dim=1).values


def check_positions(src_pad_mask: Tensor, lengths: Tensor, max_positions: int) -> None:
    """Fail, naming the row, where a source and its target's decoder inputs (as many as its real target tokens,
    `lengths` (B,)) do not fit a one-stack model's positions together. src_pad_mask: (B, S) True at padding."""
    fed = (~src_pad_mask).sum(dim=1) + lengths  # (B,)
    over = (fed > max_positions).nonzero()
    if over.numel():
        row = int(over[0])
        raise ValueError(f"row {row}: source and target take {int(fed[row])} positions together, more than "
                         f"model.max_positions={max_positions}; shorten them")
