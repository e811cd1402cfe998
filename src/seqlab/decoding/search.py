"""Search strategies over a Seq2SeqTransformer: greedy/sampling (one token per row) and beam search.

Both work on a whole batch with beams folded into the batch axis, reuse the
model's KV cache, and drop examples that are done from the batch (their cache
rows too), so finished work costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from seqlab.decoding.processors import LogitsProcessor, apply
from seqlab.decoding.sampling import gumbel_noise
from seqlab.model import DecoderCache, Seq2SeqTransformer

NEG = -1.0e9  # HF's "impossible" score: finite, so sums and top-k stay well defined
COMPACT_EVERY = 8  # finished rows leave the batch once they are this fraction (1/8) of it: fewer cache copies


@dataclass
class SearchResult:
    """Per example: n hypotheses of generated ids (EOS included), their scores and token log-probs."""

    tokens: Tensor  # (B, n, L) long, PAD after the end
    scores: Tensor  # (B, n) float
    token_logprobs: Tensor  # (B, n, L) float, 0 after the end
    lengths: Tensor  # (B, n) long


StepFn = Callable[[Tensor, DecoderCache], tuple[Tensor, DecoderCache]]


def model_step(model: Seq2SeqTransformer) -> StepFn:
    """One decoder step: (N,) last tokens -> (N, V) fp32 logits and the extended cache."""

    def step(last: Tensor, cache: DecoderCache) -> tuple[Tensor, DecoderCache]:
        logits, cache = model.decode(last[:, None], None, None, cache)
        return logits[:, -1].float(), cache

    return step


def sample_or_greedy(
    step: StepFn, cache: DecoderCache, bos: int, eos: int, pad: int, max_new: Tensor,
    processors: Sequence[LogitsProcessor], keys: Tensor | None, seed: int,
) -> SearchResult:
    """One hypothesis per row: argmax of the processed scores, or a keyed Gumbel-max sample.

    max_new: (N,) per-row limit on generated tokens. keys: (N,) per-row sampling keys or None (greedy).
    """
    n, limit = max_new.shape[0], int(max_new.max())
    device = max_new.device
    tokens = torch.full((n, limit), pad, dtype=torch.long, device=device)
    logprobs = torch.zeros((n, limit), device=device)
    prefix = torch.full((n, 1), bos, dtype=torch.long, device=device)  # rows in the batch
    active = torch.arange(n, device=device)  # their example index
    running = torch.ones(n, dtype=torch.bool, device=device)  # not finished yet
    lengths = torch.zeros(n, dtype=torch.long, device=device)
    for t in range(limit):
        logits, cache = step(prefix[:, -1], cache)  # (A, V)
        scores = apply(processors, prefix, logits)
        if keys is not None:
            scores = scores.double() + gumbel_noise(seed, keys[active], t, scores.shape[-1])
        next_tok = scores.argmax(dim=-1)  # (A,)
        live = active[running]
        tokens[live, t] = next_tok[running]
        logprobs[live, t] = F.log_softmax(logits[running], dim=-1).gather(1, next_tok[running, None]).squeeze(1)
        lengths[live] = t + 1
        prefix = torch.cat([prefix, next_tok[:, None]], dim=1)
        running &= (next_tok != eos) & (t + 1 < max_new[active])
        finished = int((~running).sum())
        if finished == running.numel():
            break
        if finished * COMPACT_EVERY >= running.numel():  # drop finished rows once they are 1/8 of the batch
            keep = running.nonzero().squeeze(1)
            active, prefix, running, cache = active[keep], prefix[keep], running[keep], cache.reorder(keep)
    return SearchResult(tokens[:, None], logprobs[:, None].sum(-1), logprobs[:, None], lengths[:, None])


def _pick(old: Tensor, new: Tensor, best: Tensor) -> Tensor:
    """Rows `best` (A, K) of old (A, K, ...) and new (A, C, ...) concatenated along dim 1."""
    index = best.view(*best.shape, *([1] * (old.dim() - 2))).expand(-1, -1, *old.shape[2:])
    return torch.cat([old, new], 1).gather(1, index)


def beam_search(
    step: StepFn, cache: DecoderCache, bos: int, eos: int, pad: int, max_new: Tensor, num_beams: int,
    length_penalty: float, early_stopping: bool | str, processors: Sequence[LogitsProcessor],
) -> SearchResult:
    """Hugging Face's beam search (see DecodingConfig), with done examples dropped from the batch.

    cache holds B * num_beams rows, example-major. max_new: (B,) per-example limits.
    """
    b, k, c = max_new.shape[0], num_beams, 2 * num_beams
    limit, device = int(max_new.max()), max_new.device
    seq = torch.full((b, k, limit + 1), pad, dtype=torch.long, device=device)
    seq[:, :, 0] = bos
    tok_lp = torch.zeros((b, k, limit + 1), device=device)  # unwarped log-prob of each token
    run_scores = torch.zeros((b, k), device=device)
    run_scores[:, 1:] = NEG  # all beams start identical: expand only the first
    fin_seq, fin_lp = seq.clone(), tok_lp.clone()
    fin_scores = torch.full((b, k), NEG, device=device)
    fin_len = torch.zeros((b, k), dtype=torch.long, device=device)
    is_fin = torch.zeros((b, k), dtype=torch.bool, device=device)
    improvable = torch.ones(b, dtype=torch.bool, device=device)
    active = torch.arange(b, device=device)  # examples still searching
    for t in range(limit):
        a = active.shape[0]
        seq_a, tok_lp_a = seq[active], tok_lp[active]  # (A, K, L + 1)
        prefix = seq_a[:, :, : t + 1].reshape(a * k, t + 1)
        logits, cache = step(prefix[:, -1], cache)  # (A*K, V)
        vocab = logits.shape[-1]
        raw_lp = F.log_softmax(logits, dim=-1)
        scores = apply(processors, prefix, raw_lp).view(a, k, vocab) + run_scores[active][:, :, None]
        top_scores, top_idx = torch.topk(scores.view(a, k * vocab), c)  # (A, C)
        src_beam, tok = top_idx // vocab, top_idx % vocab
        cand_seq = seq_a.gather(1, src_beam[:, :, None].expand(-1, -1, limit + 1))
        cand_seq[:, :, t + 1] = tok
        cand_lp = tok_lp_a.gather(1, src_beam[:, :, None].expand(-1, -1, limit + 1))
        cand_lp[:, :, t + 1] = raw_lp.view(a, k * vocab).gather(1, top_idx)
        hits = (tok == eos) | (t + 1 >= max_new[active])[:, None]  # (A, C)

        # The best K candidates that did not stop continue.
        continuing = top_scores + hits.float() * NEG
        keep = torch.topk(continuing, k)[1]  # (A, K)
        seq[active] = cand_seq.gather(1, keep[:, :, None].expand(-1, -1, limit + 1))
        tok_lp[active] = cand_lp.gather(1, keep[:, :, None].expand(-1, -1, limit + 1))
        run_scores[active] = continuing.gather(1, keep)
        origin = src_beam.gather(1, keep)  # (A, K) beam each survivor came from

        # Stopped candidates among the top K join the finished set if they beat it.
        just_fin = hits & (torch.arange(c, device=device) < k)[None, :]
        new_scores = top_scores / float(t + 1) ** length_penalty
        full = is_fin[active].all(dim=1, keepdim=True) & (early_stopping is True)
        new_scores = new_scores + full.float() * NEG + (~improvable[active])[:, None].float() * NEG
        new_scores = new_scores + (~just_fin).float() * NEG
        merged_scores = torch.cat([fin_scores[active], new_scores], dim=1)
        best = torch.topk(merged_scores, k)[1]  # (A, K)
        fin_seq[active] = _pick(fin_seq[active], cand_seq, best)
        fin_lp[active] = _pick(fin_lp[active], cand_lp, best)
        fin_len[active] = _pick(fin_len[active], torch.full_like(tok, t + 1), best)
        is_fin[active] = _pick(is_fin[active], just_fin, best)
        fin_scores[active] = merged_scores.gather(1, best)

        # HF's early-stop heuristic: can the best running beam still beat the worst finished one?
        never = early_stopping == "never" and length_penalty > 0
        cur = max_new[active, None].float() if never else torch.tensor(float(t + 1), device=device)
        best_running = run_scores[active][:, :1] / cur**length_penalty
        worst = torch.where(is_fin[active], fin_scores[active].min(dim=1, keepdim=True)[0], NEG)
        improvable[active] &= (best_running > worst).any(dim=1)
        done = ~improvable[active] | (is_fin[active].all(dim=1) & (early_stopping is True))
        done |= t + 1 >= max_new[active]
        rows = (torch.arange(a, device=device)[:, None] * k + origin).view(-1)
        if done.any():  # drop finished examples (their beams and cross keys/values) from the batch
            stay = (~done).nonzero().squeeze(1)
            if stay.numel() == 0:
                break
            active = active[stay]
            cache = cache.reorder(rows.view(a, k)[stay].view(-1))
        else:
            cache.rearrange_(rows)  # beams moved within their example: copy only the rows that changed
    within = torch.arange(limit, device=device)[None, None, :] < fin_len[:, :, None]
    return SearchResult(fin_seq[:, :, 1:], fin_scores, fin_lp[:, :, 1:] * within, fin_len)
