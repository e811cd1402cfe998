"""Contrastive search (Su et al. 2022, "A Contrastive Framework for Neural Text Generation"), as Hugging Face
`generate` runs it (`penalty_alpha`, `top_k`; transformers <= 4.55, since then a hub repository).

At each step the processed distribution's top_k tokens are the candidates; the decoder runs one step on every
candidate to get its last hidden state h_c, and the chosen candidate maximizes

    (1 - alpha) * p(c) - alpha * max_j cos(h_c, h_j)

where h_j are the hidden states of the tokens so far, the decoder start token's included (the degeneration
penalty: a candidate whose representation repeats the context's is unlikely to say anything new). The chosen
candidate's step is kept: its cache rows, hidden state and next-token logits, so each step decodes K rows per
source and wastes K - 1 of them, as HF's does. Ties go to the earlier (more probable) candidate, as
`torch.max` picks them in HF's `_ranking_fast`. The hidden states are the decoder's output after its final
norm (HF's last `decoder_hidden_states`); the scores and the ranking are computed in fp32.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from seqlab.constants import ForceEOS, HasSpecialIds
from seqlab.decoding.processors import LogitsProcessor, apply, for_examples
from seqlab.decoding.search import GenerateOutput, ending, ends, start_tokens, with_forced_eos
from seqlab.model import DecoderCache, Model


def state_step(model: Model, last: Tensor, cache: DecoderCache) -> tuple[Tensor, Tensor]:
    """One decoder step on (N,) tokens: (N, V) fp32 logits and (N, d) fp32 last hidden states."""
    states: list[Tensor] = []
    logits, _ = model.decode(last[:, None], None, None, cache, states=states)
    return logits[:, -1].float(), states[0][:, -1].float()


def degeneration_choice(context: Tensor, candidates: Tensor, probs: Tensor, alpha: float) -> Tensor:
    """(A,) the index of the chosen candidate: HF's `_ranking_fast`.

    context: (A, L, d) hidden states so far; candidates: (A, K, d); probs: (A, K) their probabilities."""
    ctx = context / context.norm(dim=2, keepdim=True)
    cand = candidates / candidates.norm(dim=2, keepdim=True)
    penalty = (cand @ ctx.transpose(1, 2)).max(dim=-1)[0]  # (A, K): max cosine over the context
    return ((1.0 - alpha) * probs - alpha * penalty).max(dim=-1)[1]


def contrastive_search(model: Model, cache: DecoderCache, *, ids: HasSpecialIds, max_new: Tensor,
                       processors: Sequence[LogitsProcessor], top_k: int, alpha: float,
                       force_eos: ForceEOS | None = None, start: Tensor | None = None) -> GenerateOutput:
    """One hypothesis per row of `cache` (one row per source); max_new: (N,) per-row limits."""
    bos, eos, pad = ids.bos_id, ids.eos_id, ids.pad_id
    n, limit = max_new.shape[0], int(max_new.max())
    device = max_new.device
    tokens = torch.full((n, limit), pad, dtype=torch.long, device=device)
    logprobs = torch.zeros((n, limit), device=device)
    lengths = torch.zeros(n, dtype=torch.long, device=device)
    prefix = start_tokens(start, bos, (n, 1), device)
    active = torch.arange(n, device=device)  # the example index of each row still decoding
    logits, first = state_step(model, prefix[:, -1], cache)
    context = first[:, None]  # (A, L, d)
    for t in range(limit):
        a = active.shape[0]
        scores = apply(for_examples(processors, active), prefix, logits)
        at_limit = t + 1 >= max_new[active]
        scores = with_forced_eos(logits, scores, at_limit, eos, force_eos)
        top_probs, top_ids = torch.softmax(scores, dim=-1).topk(top_k, dim=-1)  # (A, K)
        cache.expand_(top_k)
        cand_logits, cand_states = state_step(model, top_ids.view(-1), cache)  # (A * K, V), (A * K, d)
        chosen = degeneration_choice(context, cand_states.view(a, top_k, -1), top_probs, alpha)  # (A,)
        rows = torch.arange(a, device=device) * top_k + chosen
        next_tok = top_ids.gather(1, chosen[:, None]).squeeze(1)
        next_tok = ending(next_tok, at_limit, eos, force_eos)
        tokens[active, t] = next_tok
        logprobs[active, t] = F.log_softmax(logits, dim=-1).gather(1, next_tok[:, None]).squeeze(1)
        lengths[active] = t + 1
        running = (~ends(next_tok, ids) & ~at_limit).nonzero().squeeze(1)
        if running.numel() == 0:
            break
        cache.collapse_(rows[running])
        prefix = torch.cat([prefix, next_tok[:, None]], dim=1)[running]
        context = torch.cat([context, cand_states[rows][:, None]], dim=1)[running]
        logits, active = cand_logits[rows[running]], active[running]
    return GenerateOutput(tokens[:, None], logprobs[:, None].sum(-1), logprobs[:, None], lengths[:, None])
