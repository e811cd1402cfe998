"""How a model reads a row: the part of the model boundary that says what the architecture means to the code
around the model (searches, scoring, engines, inspection, evaluation, training, exports).

The three architectures and the two starts make four layouts, declared here once (`layout_of`), so that no
module outside `seqlab.model` compares `model.architecture` or `model.start`: it asks the layout how a row starts
(`split`: a causal LM continues its prompt's last token, the others start from the decoder start token), what
the positions count (`one_sequence`: source and target in one range, no encoder memory), and which export class
carries the model (`hf_class`, `ct2_class`, or the reason there is none).

A model seqlab trains (start=bos) reads the source, then the decoder start token, then the target; an imported
causal LM (start=prompt) continues its prompt: the prompt's last real token is each row's first decoder input,
and the rest is the cache's prompt.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from seqlab.config import ConfigError


@dataclass(frozen=True)
class RowLayout:
    """What the code around a model needs to know of its architecture (see the module docstring)."""

    # how a row starts: True, the prompt's last real token is the first decoder input (a causal LM continuing
    # text); False, the decoder start token (bos) is, after the encoder's memory or the source in the stack
    continues_prompt: bool
    # what the positions count: True, the source (or prompt) and the decoder's inputs share one range of
    # positions and one stack's attention (no encoder memory, no cross-attention); False, each stack its own
    one_sequence: bool
    # the transformers Auto class that loads the exported folder, None where no Hugging Face family computes it
    hf_class: str | None
    # the CTranslate2 class that decodes the converted model (Translator, Generator), None where none computes it
    ct2_class: str | None
    # why an export class is None, a sentence naming the model's key (empty where both exist)
    unexportable: str = ""

    @property
    def cross_attention(self) -> bool:
        """Whether the decoder attends to an encoder's memory (coverage penalties, alignments read it)."""
        return not self.one_sequence

    def split(self, src_ids: Tensor, src_pad_mask: Tensor, pad_id: int) -> tuple[Tensor, Tensor, Tensor | None]:
        """(what the model reads before its first decoder input (B, S'), its pad mask, that input per row (B,)
        or None where it is the decoder start token): a causal LM's prompt loses its last real token to the
        decoder (`split_prompt`); every other source is read whole."""
        if self.continues_prompt:
            return split_prompt(src_ids, src_pad_mask, pad_id)
        return src_ids, src_pad_mask, None

    def read_before_target(self, src_pad_mask: Tensor) -> Tensor:
        """(B, S) the pad mask of what a row holds before its first decoder input: the source, or a causal LM's
        prompt without its last token (which the first step feeds)."""
        return last_token_as_padding(src_pad_mask) if self.continues_prompt else src_pad_mask

    def room(self, limits: Tensor, read_pad_mask: Tensor, max_positions: int) -> Tensor:
        """(B,) length limits within the model's positions: in one sequence the source (or prompt, as
        `read_before_target` gives it) takes its share of them; an encoder-decoder's limits are its own."""
        return position_room(limits, read_pad_mask, max_positions) if self.one_sequence else limits

    def prompt_room(self, max_positions: int, new_tokens: int | None) -> int:
        """The longest source one sequence takes: a causal LM's prompt leaves room for `new_tokens` (decoding's
        max_length), a model seqlab trains for its decoder start token; an encoder's source is cut instead
        (all its positions)."""
        if not self.one_sequence:
            return max_positions
        return max_positions - (new_tokens or 1) if self.continues_prompt else max_positions - 1

    def three_kinds(self, weights: list[Tensor], source: int) -> dict[str, list[Tensor]] | None:
        """One stack's attention weights, per layer (H, S + T, S + T), as the encoder's, the decoder's own and
        the cross-attention's parts (source `source` tokens long); None for an encoder-decoder, whose three
        kinds are their own modules."""
        if not self.one_sequence:
            return None
        s = source
        return {"encoder": [w[:, :s, :s] for w in weights], "decoder_self": [w[:, s:, s:] for w in weights],
                "cross": [w[:, s:, :s] for w in weights]}


ENCODER_DECODER = RowLayout(continues_prompt=False, one_sequence=False, hf_class="AutoModelForSeq2SeqLM",
                            ct2_class="Translator")
DECODER_ONLY = RowLayout(continues_prompt=False, one_sequence=True, hf_class="AutoModelForCausalLM",
                         ct2_class="Generator")
CAUSAL_LM = RowLayout(continues_prompt=True, one_sequence=True, hf_class="AutoModelForCausalLM",
                      ct2_class="Generator")
PREFIX_LM = RowLayout(continues_prompt=False, one_sequence=True, hf_class=None, ct2_class=None,
                      unexportable="model.architecture=prefix_lm: its source part attends to all of itself, which "
                                   "neither a Hugging Face causal LM nor CTranslate2's Generator computes (both "
                                   "attend causally throughout)")


def layout_of(architecture: str, start: str) -> RowLayout:
    """The layout of a validated ModelConfig's architecture and start (the one place they become behaviour
    outside the model classes)."""
    if architecture == "encoder_decoder":
        return ENCODER_DECODER
    if architecture == "prefix_lm":
        return PREFIX_LM
    return CAUSAL_LM if start == "prompt" else DECODER_ONLY


def last_token_as_padding(src_pad_mask: Tensor) -> Tensor:
    """A right-padded pad mask (B, P) with each row's last real token marked as padding: the prompt a causal LM
    has read before its first decoder step, which feeds that token (rows without a token stay as they are)."""
    lengths = (~src_pad_mask).sum(dim=1)  # (B,)
    rows = (lengths > 0).nonzero().squeeze(1)
    pad = src_pad_mask.clone()
    pad[rows, lengths[rows] - 1] = True
    return pad


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
    pad = last_token_as_padding(src_pad_mask)
    ids = src_ids.masked_fill(pad, pad_id)
    return ids[:, :width], pad[:, :width], start


def position_room(limits: Tensor, src_pad_mask: Tensor, max_positions: int) -> Tensor:
    """(B,) the length limits within a one-stack model's positions: the source (or prompt) and the decoder's
    inputs share them; a prompt that leaves no room fails, naming it."""
    room = max_positions - (~src_pad_mask).sum(dim=1)
    full = (room < 1).nonzero()
    if full.numel():
        raise ConfigError(f"prompt {int(full[0])} of the batch leaves no room for a new token within "
                          f"model.max_positions={max_positions}: shorten it")
    return torch.minimum(limits, room)
