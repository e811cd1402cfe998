"""What decoding a one-stack model adds: its limits within the model's positions, the prompt's last token as a
causal LM's first decoder input, and the options it cannot take.

A model seqlab trains (model.start=bos) reads the source, then the decoder start token, then the target; an
imported causal LM (model.start=prompt) continues its prompt: the prompt's last real token is each row's first
decoder input (`split_prompt`) and the rest is the cache's prompt. Hugging Face's decoder-only processors read
the prompt too (a repetition penalty counts prompt tokens); seqlab's processors see what follows the prompt, so
those that would read it are refused by name on such a model rather than computed another way.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqlab.config import ConfigError
from seqlab.model import ModelConfig

# Hugging Face's decoder-only processors that read the prompt's tokens (its `input_ids` hold the prompt)
PROMPT_READERS = ("repetition_penalty", "frequency_penalty", "presence_penalty", "no_repeat_ngram_size",
                  "bad_words_ids", "sequence_bias")


def check_one_stack(cfg: object, model: ModelConfig) -> None:
    """Fail, naming the key, on a decoding option a one-stack model cannot take (`cfg`: a DecodingConfig)."""
    if not model.one_stack:
        return
    arch = f"model.architecture={model.architecture}"
    if cfg.coverage_penalty is not None:
        raise ConfigError(f"decoding.coverage_penalty={cfg.coverage_penalty} sums cross-attention, which "
                          f"{arch} has none of: set decoding.coverage_penalty=null")
    if model.start != "prompt":
        return
    if cfg.max_length is None:
        raise ConfigError(f"decoding.max_len_a / max_len_b set a length limit as a share of a source, which a "
                          f"causal LM's prompt is not ({arch}, model.start=prompt): set decoding.max_length (the "
                          "new tokens, Hugging Face's max_new_tokens)")
    readers = [key for key in PROMPT_READERS if getattr(cfg, key)]
    if readers:
        raise ConfigError(f"decoding.{readers[0]}={getattr(cfg, readers[0])!r}: on a causal LM Hugging Face's "
                          "processor reads the prompt's tokens too, which seqlab's does not: set it to null")


def split_prompt(src_ids: Tensor, src_pad_mask: Tensor, pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """(the prompts without their last real token (B, P') and its pad mask, that token (B,)) of right-padded
    prompts (B, P); an empty prompt fails, naming it."""
    lengths = (~src_pad_mask).sum(dim=1)  # (B,)
    empty = (lengths == 0).nonzero()
    if empty.numel():
        raise ConfigError(f"prompt {int(empty[0])} of the batch is empty: a causal LM continues its prompt's last "
                          "token; give at least one token (its BOS, where the family has one)")
    rows = torch.arange(src_ids.shape[0], device=src_ids.device)
    start = src_ids[rows, lengths - 1]
    width = int(lengths.max()) - 1
    pad = src_pad_mask.clone()
    pad[rows, lengths - 1] = True
    ids = src_ids.masked_fill(pad, pad_id)
    return ids[:, :width], pad[:, :width], start


def position_room(limits: Tensor, src_pad_mask: Tensor, model: ModelConfig) -> Tensor:
    """(B,) the length limits within a one-stack model's positions: the source (or prompt) and the decoder's
    inputs share them; a prompt that leaves no room fails, naming it."""
    room = model.max_positions - (~src_pad_mask).sum(dim=1)
    full = (room < 1).nonzero()
    if full.numel():
        raise ConfigError(f"prompt {int(full[0])} of the batch leaves no room for a new token within "
                          f"model.max_positions={model.max_positions}: shorten it")
    return torch.minimum(limits, room)
