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
from torch import Tensor

from seqlab.constants import ForceEOS, HasSpecialIds
from seqlab.decoding.beam import (
    Beams,
    Finished,
    candidate_scores,
    expand,
    finalize,
    is_done,
    merge_finished,
    select_running,
)
from seqlab.decoding.processors import LogitsProcessor
from seqlab.decoding.search import NEG, GenerateOutput, LengthPenalty, StepBuffers, start_tokens


def hamming_penalty(chosen: Tensor, vocab: int, penalty: float) -> Tensor:
    """(A, V) penalty * how often each token is among `chosen` (A, n) tokens of the earlier groups."""
    counts = torch.zeros((chosen.shape[0], vocab), device=chosen.device)
    counts.scatter_add_(1, chosen, torch.ones_like(chosen, dtype=counts.dtype))
    return penalty * counts


class DiverseBeams:
    """Diverse beam search as a `beam_loop` strategy (see the module docstring). The cache holds B * K rows
    from the start (example-major, group-major within an example): every group's first beam is decoded."""

    once_first = False

    def __init__(self, ids: HasSpecialIds, max_new: Tensor, num_beams: int, num_groups: int,
                 diversity_penalty: float, length_penalty: LengthPenalty, early_stopping: bool | str,
                 force_eos: ForceEOS | None, start: Tensor | None) -> None:
        b, g = max_new.shape[0], num_beams // num_groups
        limit, device = int(max_new.max()), max_new.device
        self.width, self.groups, self.group_width, self.ids = num_beams, num_groups, g, ids
        self.max_new, self.diversity_penalty, self.force_eos = max_new, diversity_penalty, force_eos
        self.length_penalty, self.early_stopping = length_penalty, early_stopping
        self.seq = torch.full((b, num_groups, g, limit + 1), ids.pad_id, dtype=torch.long, device=device)
        self.seq[..., 0] = start_tokens(start, ids.bos_id, (b, num_groups, g), device)
        self.tok_lp = torch.zeros((b, num_groups, g, limit + 1), device=device)
        self.scores = torch.zeros((b, num_groups, g), device=device)
        self.scores[:, :, 1:] = NEG  # each group starts from one beam
        # Finished sets per (example, group): row example * num_groups + group, for all B examples.
        self.fin = Finished.empty(self.seq.view(b * num_groups, g, -1), self.tok_lp.view(b * num_groups, g, -1))
        self.done = torch.zeros((b, num_groups), dtype=torch.bool, device=device)
        self.work = StepBuffers()

    def prefix(self, t: int) -> Tensor:
        return self.seq[..., : t + 1].reshape(-1, t + 1).clone()  # a copy: the groups change seq in `choose`

    def choose(self, t: int, logits: Tensor, prefix: Tensor, processors: Sequence[LogitsProcessor],
               active: Tensor) -> tuple[Tensor, Tensor]:
        a, g, groups, eos = active.shape[0], self.group_width, self.groups, self.ids.eos_id
        by_group = logits.view(a, groups, g, -1)
        vocab = by_group.shape[-1]
        chosen = torch.zeros((a, self.width), dtype=torch.long, device=logits.device)  # this step's, group by group
        origin = torch.zeros((a, groups, g), dtype=torch.long, device=logits.device)
        at_limit = t + 1 >= self.max_new[active]
        for j in range(groups):
            beams = Beams(self.seq[:, j], self.tok_lp[:, j], self.scores[:, j])  # (A, g, ...)
            penalty = (hamming_penalty(chosen[:, : j * g], vocab, self.diversity_penalty).repeat_interleave(g, 0)
                       if j > 0 and self.diversity_penalty else None)
            raw_lp, total = candidate_scores(by_group[:, j].reshape(a * g, vocab),
                                             beams.seq[:, :, : t + 1].reshape(a * g, t + 1), beams.scores,
                                             processors, at_limit, eos, self.force_eos, self.work, penalty)
            cand = expand(beams, total, raw_lp, t, self.ids, torch.zeros_like(at_limit))
            kept, origin[:, j] = select_running(cand, g)
            rows = active * groups + j
            was_done = self.done[active, j]
            finalize(self.fin, rows, cand, t, self.length_penalty, ~was_done)
            self.done[active, j] = was_done | is_done(self.fin, rows, cand.scores[:, 0], t, self.max_new[active],
                                                      self.length_penalty, self.early_stopping)
            chosen[:, j * g: (j + 1) * g] = torch.where(was_done[:, None], self.ids.pad_id, kept.seq[:, :, t + 1])
            self.seq[:, j], self.tok_lp[:, j], self.scores[:, j] = kept.seq, kept.tok_lp, kept.scores
        if at_limit.any():  # open groups of examples at their limit add their running beams (HF's finalize)
            for j in range(groups):
                new = (at_limit & ~self.done[active, j])[:, None].expand(-1, g)
                merge_finished(self.fin, active * groups + j, self.seq[:, j], self.tok_lp[:, j], self.scores[:, j],
                               t, self.length_penalty, new)
        parents = (torch.arange(groups, device=logits.device)[None, :, None] * g + origin).view(a, self.width)
        return parents, self.done[active].all(dim=1) | at_limit

    def moved(self, stay: Tensor, parents: Tensor) -> None:
        return None

    def leave(self, stay: Tensor, done: Tensor, active: Tensor) -> None:
        self.seq, self.tok_lp, self.scores = self.seq[stay], self.tok_lp[stay], self.scores[stay]

    def result(self, active: Tensor) -> GenerateOutput:
        b = self.max_new.shape[0]
        return _ranked(self.fin, b, self.width, int(self.max_new.max()))


def _ranked(fin: Finished, b: int, k: int, limit: int) -> GenerateOutput:
    """All groups' finished hypotheses of each example, best normalized score first (stable for ties)."""
    scores = fin.scores.view(b, k)
    order = torch.sort(scores, dim=1, descending=True, stable=True)[1]  # (B, K)
    seq = fin.seq.view(b, k, -1).gather(1, order[:, :, None].expand(-1, -1, limit + 1))[:, :, 1:]
    tok_lp = fin.tok_lp.view(b, k, -1).gather(1, order[:, :, None].expand(-1, -1, limit + 1))[:, :, 1:]
    lengths = fin.lengths.view(b, k).gather(1, order)
    within = torch.arange(limit, device=seq.device)[None, None, :] < lengths[:, :, None]
    return GenerateOutput(seq, scores.gather(1, order), tok_lp * within, lengths)
