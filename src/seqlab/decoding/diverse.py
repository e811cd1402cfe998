"""Diverse beam search (Vijayakumar et al. 2016, arXiv 1610.02424), as Hugging Face's `num_beam_groups`.

The K beams of each source are split into G groups of K/G. Each step, the groups choose in turn:
group j sees the model's log-probs minus `diversity_penalty * c(v)`, where c(v) counts how many
beams of groups 0..j-1 chose token v at this step (the paper's Hamming diversity, HF's
`HammingDiversityLogitsProcessor`, applied before every other processor as HF orders them). Within
a group the search is beam search of width K/G with its own finished set and stop rule; at the
end the finished hypotheses of all groups are ranked together by length-normalized score.

The semantics are those of transformers' `_group_beam_search` with `BeamSearchScorer` (the last
in-library version, 4.55): an EOS continuation joins its group's finished set only from the top
K/G of the 2K/G candidates; a group stops when its finished set is full and (early_stopping=False)
the best candidate of the step, scored at the current length, cannot beat its worst finished
hypothesis (at the maximum length for "never" with length_penalty > 0), or at once
(early_stopping=True); groups still open at the length limit add their running beams. Groups that
stopped keep contributing PAD to the counts, as in HF. Test: tests/unit/test_diverse_beam.py against
outputs recorded from transformers 4.55.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from seqlab.constants import ForceEOS, HasSpecialIds
from seqlab.decoding.processors import LogitsProcessor, apply, for_examples
from seqlab.decoding.search import (
    NEG,
    Beams,
    Finished,
    GenerateOutput,
    LengthPenalty,
    StepFn,
    expand,
    finalize,
    follow_parents,
    force_eos_,
    is_done,
    merge_finished,
    select_running,
    start_tokens,
)
from seqlab.model import DecoderCache


def hamming_penalty(chosen: Tensor, vocab: int, penalty: float) -> Tensor:
    """(A, V) penalty * how often each token is among `chosen` (A, n) tokens of the earlier groups."""
    counts = torch.zeros((chosen.shape[0], vocab), device=chosen.device)
    counts.scatter_add_(1, chosen, torch.ones_like(chosen, dtype=counts.dtype))
    return penalty * counts


def diverse_beam_search(
    step: StepFn, cache: DecoderCache, *, ids: HasSpecialIds, max_new: Tensor, num_beams: int, num_groups: int,
    diversity_penalty: float, length_penalty: LengthPenalty, early_stopping: bool | str,
    processors: Sequence[LogitsProcessor], force_eos: ForceEOS | None = None, start: Tensor | None = None,
) -> GenerateOutput:
    """Beam search in `num_groups` groups with a Hamming diversity penalty (see the module docstring).

    cache holds B * num_beams rows, example-major, group-major within an example. max_new: (B,).
    Returns all num_beams hypotheses per source, best first.
    """
    b, k, g = max_new.shape[0], num_beams, num_beams // num_groups
    limit, device = int(max_new.max()), max_new.device
    seq = torch.full((b, num_groups, g, limit + 1), ids.pad_id, dtype=torch.long, device=device)
    seq[..., 0] = start_tokens(start, ids.bos_id, (b, num_groups, g), device)
    tok_lp = torch.zeros((b, num_groups, g, limit + 1), device=device)
    scores = torch.zeros((b, num_groups, g), device=device)
    scores[:, :, 1:] = NEG  # each group starts from one beam
    # Finished sets per (example, group): row example * num_groups + group.
    fin = Finished.empty(seq.view(b * num_groups, g, -1), tok_lp.view(b * num_groups, g, -1))
    done = torch.zeros((b, num_groups), dtype=torch.bool, device=device)
    active = torch.arange(b, device=device)  # examples still searching; seq/tok_lp/scores hold their rows only
    for t in range(limit):
        a = active.shape[0]
        logits, cache = step(seq[..., t].reshape(a * k), cache)  # (A*K, V)
        prefix_all = seq[..., : t + 1].reshape(a * k, t + 1).clone()  # the groups change seq below
        raw_lp = F.log_softmax(logits, dim=-1).view(a, num_groups, g, -1)
        vocab = raw_lp.shape[-1]
        chosen = torch.zeros((a, k), dtype=torch.long, device=device)  # this step's tokens, group by group
        origin = torch.zeros((a, num_groups, g), dtype=torch.long, device=device)
        at_limit = t + 1 >= max_new[active]
        for j in range(num_groups):
            beams = Beams(seq[:, j], tok_lp[:, j], scores[:, j])  # (A, g, ...)
            prefix = beams.seq[:, :, : t + 1].reshape(a * g, t + 1)
            lp = raw_lp[:, j].reshape(a * g, vocab)
            if j > 0 and diversity_penalty:
                lp = lp - hamming_penalty(chosen[:, : j * g], vocab, diversity_penalty).repeat_interleave(g, 0)
            processed = apply(for_examples(processors, active), prefix, lp)
            if force_eos is not None:
                processed = force_eos_(processed.clone() if processed is lp else processed,
                                       at_limit.repeat_interleave(g), ids.eos_id, force_eos)
            total = processed.view(a, g, vocab) + beams.scores[:, :, None]
            cand = expand(beams, total, raw_lp[:, j].reshape(a * g, vocab), t, ids.eos_id,
                          torch.zeros_like(at_limit))
            kept, origin[:, j] = select_running(cand, g)
            rows = active * num_groups + j
            was_done = done[active, j]
            finalize(fin, rows, cand, t, length_penalty, ~was_done)
            done[active, j] = was_done | is_done(fin, rows, cand.scores[:, 0], t, max_new[active],
                                                 length_penalty, early_stopping)
            chosen[:, j * g: (j + 1) * g] = torch.where(was_done[:, None], ids.pad_id, kept.seq[:, :, t + 1])
            seq[:, j], tok_lp[:, j], scores[:, j] = kept.seq, kept.tok_lp, kept.scores
        if at_limit.any():  # open groups of examples at their limit add their running beams (HF's finalize)
            for j in range(num_groups):
                rows = active * num_groups + j
                new = (at_limit & ~done[active, j])[:, None].expand(-1, g)
                merge_finished(fin, rows, seq[:, j], tok_lp[:, j], scores[:, j], t, length_penalty, new)
        stop = done[active].all(dim=1) | at_limit
        if bool(stop.all()):
            break
        parents = (torch.arange(num_groups, device=device)[None, :, None] * g + origin).view(a, k)
        stay, _ = follow_parents(cache, prefix_all, parents, stop)
        if stay.shape[0] < a:
            active, seq, tok_lp, scores = active[stay], seq[stay], tok_lp[stay], scores[stay]
    return _ranked(fin, b, k, limit)


def _ranked(fin: Finished, b: int, k: int, limit: int) -> GenerateOutput:
    """All groups' finished hypotheses of each example, best normalized score first (stable for ties)."""
    scores = fin.scores.view(b, k)
    order = torch.sort(scores, dim=1, descending=True, stable=True)[1]  # (B, K)
    seq = fin.seq.view(b, k, -1).gather(1, order[:, :, None].expand(-1, -1, limit + 1))[:, :, 1:]
    tok_lp = fin.tok_lp.view(b, k, -1).gather(1, order[:, :, None].expand(-1, -1, limit + 1))[:, :, 1:]
    lengths = fin.lengths.view(b, k).gather(1, order)
    within = torch.arange(limit, device=seq.device)[None, None, :] < lengths[:, :, None]
    return GenerateOutput(seq, scores.gather(1, order), tok_lp * within, lengths)
