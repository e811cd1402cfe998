"""What decoding a one-stack model adds: its limits within the model's positions, the prompt's last token as a
causal LM's first decoder input, and the processors that read the prompt.

A model seqlab trains (model.start=bos) reads the source, then the decoder start token, then the target; an
imported causal LM (model.start=prompt) continues its prompt: the prompt's last real token is each row's first
decoder input (`seqlab.model.layout`) and the rest is the cache's prompt. Hugging Face's decoder-only processors see
the prompt in their `input_ids`: a repetition penalty counts prompt tokens, no-repeat n-grams and banned or
biased sequences match across the prompt's end. seqlab gives those processors each row's prompt before what it
generated (`InPrompt`), its real tokens only, so a prompt's output does not depend on the padding of the batch
around it: the same as `generate` on one prompt alone. Frequency and presence penalties count generated tokens
(vLLM's and llama.cpp's output penalties), the prompt's last token included in neither.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from seqlab.config import ConfigError
from seqlab.decoding.config import DecodingConfig
from seqlab.decoding.processors import BadWords, Ban, LogitsProcessor, NoRepeatNGram, RepetitionPenalty, SequenceBias
from seqlab.model import ModelConfig

# Hugging Face's decoder-only processors that read the prompt's tokens (its `input_ids` hold the prompt)
PROMPT_READERS = (RepetitionPenalty, NoRepeatNGram, BadWords, SequenceBias)
NO_TOKEN = -1  # context padding that no token sequence matches


def check_layout(cfg: DecodingConfig, model: ModelConfig) -> None:
    """Fail, naming the key, on a decoding option the model's layout cannot take."""
    arch = f"model.architecture={model.architecture}"
    if cfg.coverage_penalty is not None and not model.layout.cross_attention:
        raise ConfigError(f"decoding.coverage_penalty={cfg.coverage_penalty} sums cross-attention, which "
                          f"{arch} has none of: set decoding.coverage_penalty=null")
    if model.layout.continues_prompt and cfg.max_length is None:
        raise ConfigError(f"decoding.max_len_a / max_len_b set a length limit as a share of a source, which a "
                          f"causal LM's prompt is not ({arch}, model.start=prompt): set decoding.max_length (the "
                          "new tokens, Hugging Face's max_new_tokens)")


def prompt_context(prompt_ids: Tensor, prompt_pad_mask: Tensor) -> Tensor:
    """(B, C) each prompt's real tokens before its last one, right-aligned, NO_TOKEN before them: what a
    processor reads before the decoder's first input (the prompt's last token)."""
    lengths = (~prompt_pad_mask).sum(dim=1)
    out = torch.full_like(prompt_ids, NO_TOKEN)
    for i, n in enumerate(lengths.tolist()):
        out[i, prompt_ids.shape[1] - n :] = prompt_ids[i, :n]
    return out


class InPrompt(LogitsProcessor):
    """A processor that reads each row's prompt before its tokens, as Hugging Face's decoder-only processors
    read `input_ids`. context: (N, C) per example (`prompt_context`); examples: (A,) the example of each row or
    group of rows (a source's beams), bound at every step as examples leave (`for_examples`)."""

    def __init__(self, inner: LogitsProcessor, context: Tensor, examples: Tensor | None = None) -> None:
        self.inner, self.context, self.examples = inner, context, examples

    def for_examples(self, examples: Tensor) -> InPrompt:
        return type(self)(self.inner, self.context, examples)

    def full(self, prefix: Tensor) -> Tensor:
        """(rows, C + T) the rows' prompts, then `prefix`; a repetition penalty's padding repeats a token the
        row already has (counting a token twice changes nothing), the others' matches nothing."""
        context = self.context if self.examples is None else self.context[self.examples]
        context = context.repeat_interleave(prefix.shape[0] // context.shape[0], 0)
        if isinstance(self.inner, RepetitionPenalty):
            context = torch.where(context == NO_TOKEN, prefix[:, -1:], context)
        return torch.cat([context, prefix], dim=1)

    def __call__(self, prefix: Tensor, scores: Tensor) -> Tensor:
        return self.inner(self.full(prefix), scores)


class BanInPrompt(InPrompt, Ban):
    """InPrompt for a processor that only bans (applied in place by beam search)."""

    def active(self, prefix: Tensor) -> bool:
        return True

    def ban_(self, prefix: Tensor, scores: Tensor) -> None:
        self.inner.ban_(self.full(prefix), scores)

    def __call__(self, prefix: Tensor, scores: Tensor) -> Tensor:
        return self.inner(self.full(prefix), scores)


def in_prompt(processors: Sequence[LogitsProcessor], context: Tensor) -> list[LogitsProcessor]:
    """The processors with those that read the prompt reading it (`context`: per example)."""
    return [(BanInPrompt if isinstance(p, Ban) else InPrompt)(p, context) if isinstance(p, PROMPT_READERS) else p
            for p in processors]
