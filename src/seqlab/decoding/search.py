"""Greedy search and sampling over a model (`seqlab.model.Model`, one token per row), and what every search
shares: its output, the step function, forced EOS, step buffers, the start tokens, the length penalty. Beam
search is `decoding.beam`.

Searches work on a whole batch (beams folded into the batch axis), reuse the model's KV cache, and drop the
rows that are done from the batch (their cache rows too), so finished work costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from seqlab.constants import ForceEOS, HasSpecialIds
from seqlab.decoding.processors import NEG_INF, LogitsProcessor, apply, for_examples
from seqlab.decoding.sampling import gumbel_noise
from seqlab.model import DecoderCache, Model
from seqlab.model.cache import in_place_order

NEG = -1.0e9  # HF's "impossible" score: finite, so sums and top-k stay well defined
COMPACT_EVERY = 8  # finished rows leave the batch once they are this fraction (1/8) of it: fewer cache copies


@dataclass
class GenerateOutput:
    """Hypotheses per source, best first; token ids exclude BOS and include EOS when emitted."""

    sequences: Tensor  # (B, n, T) long, PAD after each hypothesis
    scores: Tensor  # (B, n) ranking score (beam: after length penalty; else sum of log-probs)
    token_logprobs: Tensor  # (B, n, T) model log-prob of each token, unwarped; 0 after the end
    lengths: Tensor  # (B, n) generated tokens, EOS included

    @property
    def sequence_logprobs(self) -> Tensor:
        """(B, n) sum of the model's log-probs of each hypothesis."""
        return self.token_logprobs.sum(-1)


StepFn = Callable[[Tensor, DecoderCache], tuple[Tensor, DecoderCache]]


def model_step(model: Model) -> StepFn:
    """One decoder step: (N,) last tokens -> (N, V) fp32 logits and the extended cache."""

    def step(last: Tensor, cache: DecoderCache) -> tuple[Tensor, DecoderCache]:
        logits, cache = model.decode(last[:, None], None, None, cache)
        return logits[:, -1].float(), cache

    return step


def force_eos_(scores: Tensor, at_limit: Tensor, eos: int, rule: ForceEOS, running: Tensor | None = None) -> Tensor:
    """Rows at their last allowed step may only emit EOS; in place, returns `scores`.

    rule "hf" (Hugging Face's ForcedEOSTokenLogitsProcessor): EOS is scored 0, plus the row's running
    score when `running` is given (scores that already include it). rule "fairseq" (SequenceGenerator
    at max_len): the other tokens are masked and EOS keeps its own score, so its log-prob counts and a
    row whose EOS is impossible (-inf) cannot end there (beam search never finishes it).
    scores: (N, V) processed scores; at_limit: (N,) bool; running: (N,) or None.
    """
    rows = at_limit.nonzero().squeeze(1)
    if rows.numel():
        if rule == "fairseq":
            eos_scores = scores[rows, eos]  # a copy: advanced indexing
        else:
            eos_scores = running[rows] if running is not None else torch.zeros_like(scores[rows, eos])
        scores[rows] = NEG_INF
        scores[rows, eos] = eos_scores
    return scores


def with_forced_eos(logits: Tensor, scores: Tensor, at_limit: Tensor | None, eos: int,
                    rule: ForceEOS | None) -> Tensor:
    """`scores` (A, V) with EOS forced on the rows at their limit under `rule` (a copy where `scores` is still
    the model's `logits`); `scores` itself without a rule or with no row at its limit (`at_limit` None)."""
    if rule is None or at_limit is None:
        return scores
    return force_eos_(scores.clone() if scores is logits else scores, at_limit, eos, rule)


def ending(chosen: Tensor, at_limit: Tensor | None, eos: int, rule: ForceEOS | None) -> Tensor:
    """The chosen tokens (A,) with EOS on the rows at their limit under a forced-EOS rule (even where fairseq's
    rule left no finite score)."""
    return chosen if rule is None or at_limit is None else torch.where(at_limit, eos, chosen)


def choose_tokens(logits: Tensor, scores: Tensor, at_limit: Tensor | None, eos: int, rule: ForceEOS | None,
                  keys: Tensor | None, seed: int, step: int | Tensor) -> tuple[Tensor, Tensor]:
    """The one-token choice every one-token search makes (greedy search, sampling, speculative decoding's
    model and draft): from the processed `scores` (A, V), EOS forced at a row's limit, the rows' keyed Gumbel
    noise at `step` when sampling (`keys`: (A,), None for greedy), the argmax, EOS kept at the limit.
    Returns the scores chosen from and the chosen tokens (A,)."""
    scores = with_forced_eos(logits, scores, at_limit, eos, rule)
    if keys is not None:
        scores = scores.double() + gumbel_noise(seed, keys, step, scores.shape[-1])
    return scores, ending(scores.argmax(dim=-1), at_limit, eos, rule)


class StepBuffers:
    """Per-step (rows, vocabulary) tensors of a search, allocated once and reused as views of their
    first rows: a fresh (rows x vocabulary) tensor each step costs an allocation, and on CPU its page
    faults again wherever the allocator hands freed memory back to the OS."""

    def __init__(self) -> None:
        self._store: dict[str, Tensor] = {}

    def get(self, name: str, like: Tensor) -> Tensor:
        """A (like.shape) tensor of like's dtype for `name`, valid until the next get of that name."""
        n = like.shape[0]
        buf = self._store.get(name)
        if buf is None or buf.shape[0] < n or buf.shape[1:] != like.shape[1:] or buf.dtype != like.dtype:
            buf = self._store[name] = torch.empty_like(like)
        return buf[:n]


def sample_or_greedy(
    step: StepFn, cache: DecoderCache, *, ids: HasSpecialIds, max_new: Tensor,
    processors: Sequence[LogitsProcessor], keys: Tensor | None, seed: int, force_eos: ForceEOS | None = None,
    on_step: Callable[[int, Tensor, Tensor, Tensor, Tensor], None] | None = None, start: Tensor | None = None,
) -> GenerateOutput:
    """One hypothesis per row: argmax of the processed scores, or a keyed Gumbel-max sample.

    max_new: (N,) per-row limit on generated tokens. keys: (N,) per-row sampling keys or None (greedy).
    start: (N,) each row's first decoder input (a causal LM's last prompt token); None: the decoder start.
    on_step(t, active, logits, scores, next_tok), if given, sees every step: the example index of each row,
    the model's (A, V) logits, the processed scores it chose from and the chosen tokens (for traces).
    """
    bos, eos, pad = ids.bos_id, ids.eos_id, ids.pad_id
    n, limit = max_new.shape[0], int(max_new.max())
    device = max_new.device
    tokens = torch.full((n, limit), pad, dtype=torch.long, device=device)
    logprobs = torch.zeros((n, limit), device=device)
    prefix = start_tokens(start, bos, (n, 1), device)  # rows in the batch
    active = torch.arange(n, device=device)  # their example index
    running = torch.ones(n, dtype=torch.bool, device=device)  # not finished yet
    lengths = torch.zeros(n, dtype=torch.long, device=device)
    # Work that is not arithmetic, skipped where it cannot change anything (a step of a small model is
    # mostly per-operator overhead on a CPU): no row reaches its limit before `first_limit`, and while
    # every row runs, the rows need no selecting (each selection copies the (A, V) logits).
    first_limit, all_running = int(max_new.min()), True
    for t in range(limit):
        logits, cache = step(prefix[:, -1], cache)  # (A, V)
        scores = apply(for_examples(processors, active), prefix, logits)
        at_limit = t + 1 >= max_new[active] if t + 1 >= first_limit else None  # None: no row at its limit
        scores, next_tok = choose_tokens(logits, scores, at_limit, eos, force_eos,
                                         None if keys is None else keys[active], seed, t)  # (A, V), (A,)
        if all_running:
            live, live_logits, live_scores, chosen = active, logits, scores, next_tok
        else:
            live, live_logits = active[running], logits[running]
            live_scores, chosen = scores[running], next_tok[running]
        if on_step is not None:
            on_step(t, live, live_logits, live_scores, chosen)
        tokens[live, t] = chosen
        logprobs[live, t] = F.log_softmax(live_logits, dim=-1).gather(1, chosen[:, None]).squeeze(1)
        lengths[live] = t + 1
        prefix = torch.cat([prefix, next_tok[:, None]], dim=1)
        running &= ~ends(next_tok, ids) if at_limit is None else ~ends(next_tok, ids) & ~at_limit
        finished = int((~running).sum())
        all_running = finished == 0
        if finished == running.numel():
            break
        if finished * COMPACT_EVERY >= running.numel():  # drop finished rows once they are 1/8 of the batch
            keep = in_place_order(running)
            active, prefix, running = active[keep], prefix[keep], running[keep]
            cache.compact_(keep)
    return GenerateOutput(tokens[:, None], logprobs[:, None].sum(-1), logprobs[:, None], lengths[:, None])


def ends(tokens: Tensor, ids: HasSpecialIds) -> Tensor:
    """Where `tokens` end their row: the model's EOS, or any of its further end tokens (an instruct model's)."""
    return among(tokens, ids.end_ids)


def among(tokens: Tensor, end_ids: tuple[int, ...]) -> Tensor:
    """Where `tokens` are one of `end_ids` (a plain comparison for the usual single EOS)."""
    if len(end_ids) == 1:
        return tokens == end_ids[0]
    return torch.isin(tokens, torch.tensor(end_ids, device=tokens.device))


def start_tokens(start: Tensor | None, bos: int, shape: tuple[int, ...], device: torch.device) -> Tensor:
    """(B, ...) the first decoder input of every row: the decoder start token, or each source's own `start`
    (B,) (a causal LM continues its prompt's last token)."""
    if start is None:
        return torch.full(shape, bos, dtype=torch.long, device=device)
    return start.view(-1, *([1] * (len(shape) - 1))).expand(shape).clone()


def normalized(score: Tensor, length: Tensor | float, alpha: float) -> Tensor:
    """The length-normalized score of a hypothesis: sum of log-probs / length ** alpha (HF, fairseq)."""
    return score / length**alpha


LengthRule = Literal["power", "wu"]


@dataclass(frozen=True)
class LengthPenalty:
    """How beam search normalizes a finished hypothesis's summed log-prob by its length (generated tokens,
    EOS included).

    `power` divides by length ** alpha (Hugging Face, fairseq); `wu` by GNMT's ((5 + |Y|) / 6) ** alpha
    (Wu et al. 2016, eq. 14) with |Y| counted as OpenNMT-py counts it: its decoder start token included,
    so |Y| = length + 1. Both grow with the length for alpha > 0, which `is_done`'s bound needs."""

    alpha: float = 1.0
    rule: LengthRule = "power"

    def __call__(self, score: Tensor, length: Tensor | float) -> Tensor:
        if self.rule == "wu":
            return score / ((5.0 + (length + 1.0)) / 6.0) ** self.alpha
        return normalized(score, length, self.alpha)
