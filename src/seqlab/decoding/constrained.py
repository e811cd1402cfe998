"""Lexically constrained beam search with dynamic beam allocation: fairseq's `LexicallyConstrainedBeamSearch`
inside its `SequenceGenerator` (Post & Vilar 2018; Hu et al. 2019), exactly.

Every step, each example's candidates are the top 2K continuations over all its beams, the best
continuation of each beam, and each beam's constraint tokens (`ConstraintState.next_tokens`). They are
sorted by (bank, score) with fairseq's key `(distinct constraint tokens - bank) * -100 + score`,
duplicates dropped, then dealt round-robin across the banks ("stripes": the best of the highest bank,
the best of the next, ..., then the second best of each) and cut to 2K. A hypothesis may end (EOS) only
once its constraints are all met; EOS candidates among the first K finish (fairseq appends them in
candidate order until K are finished: the example is then done, fairseq's stop rule), and the first K
other candidates, in candidate order, continue.

Two departures, both where fairseq has no answer: a source whose constraints the search cannot meet within
its length limit (fairseq stops there with an assertion; generate refuses constraints longer than the limit
before decoding) gets the beams it holds at the limit, ended without EOS, after any finished ones, in the
slots left empty; and ties in the sort keys keep candidate order
(fairseq's sort is not stable).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from seqlab.constants import HasSpecialIds
from seqlab.decoding.beam import Beams, candidate_scores
from seqlab.decoding.constraints import ConstraintOrder, ConstraintState, start_state
from seqlab.decoding.processors import NEG_INF, LogitsProcessor
from seqlab.decoding.search import GenerateOutput, LengthPenalty, StepBuffers, start_tokens

BANK_WEIGHT = -100.0  # fairseq's MAX_SCORE: a bank counts as 100 nats in the first sort
Candidate = tuple[float, int, int, ConstraintState]  # (running score, parent beam, token, its constraint state)


def f32(x: float) -> float:
    """x rounded to fp32, where fairseq's sort key is computed."""
    return struct.unpack("f", struct.pack("f", x))[0]


def allocate(cands: list[tuple[float, int, int]], states: Sequence[ConstraintState], size: int,
             distinct: int) -> list[Candidate]:
    """One example's candidates (score, beam, token), in the order they were gathered, -> the first `size`
    after the (bank, score) sort, deduplication and round-robin over banks (fairseq's `step_sentence`),
    each with its advanced constraint state. `distinct`: the number of distinct constraint tokens."""
    advanced = [states[beam].advance(token) for _, beam, token in cands]
    banks = [s.bank for s in advanced]
    keys = [f32((distinct - bank) * BANK_WEIGHT + score) for bank, (score, _, _) in zip(banks, cands, strict=True)]
    order = sorted(range(len(cands)), key=lambda i: -keys[i])
    # a candidate equal to the one before it (same beam and token) goes; the first is compared with the last
    pairs = [cands[i][1:] for i in order]
    unique = [i for j, i in enumerate(order) if pairs[j] != pairs[j - 1]]
    stripes, run, previous = [], -1, None
    offset = len(unique) + 1
    for i in unique:
        run = run + 1 if banks[i] == previous else 0
        previous = banks[i]
        stripes.append(distinct - banks[i] + run * offset)
    dealt = [unique[j] for j in sorted(range(len(unique)), key=stripes.__getitem__)][:size]
    return [(*cands[i], advanced[i]) for i in dealt]


def gather_candidates(scores: Tensor, states: list[list[ConstraintState]], t: int
                      ) -> list[list[tuple[float, int, int]]]:
    """Per example, the candidates before allocation: the top 2K (score, beam, token) over its beams, then
    (after the first step) each beam's best token, then each beam's constraint tokens (only the first
    beam's on the first step, when all beams are the same). scores: (A, K, V) cumulative scores."""
    a, k, vocab = scores.shape
    rows = scores[:, :1] if t == 0 else scores  # (A, rows, V)
    top_scores, top_idx = torch.topk(rows.reshape(a, -1), 2 * k)  # (A, 2K)
    top = [list(zip(s, (i // vocab for i in idx), (i % vocab for i in idx), strict=True))
           for s, idx in zip(top_scores.tolist(), top_idx.tolist(), strict=True)]
    if t > 0:
        best_scores, best_tok = scores.max(dim=-1)  # (A, K)
        for cands, s_row, t_row in zip(top, best_scores.tolist(), best_tok.tolist(), strict=True):
            cands.extend(zip(s_row, range(k), t_row, strict=True))
    wanted = [(e, beam, token) for e, example in enumerate(states)
              for beam, state in enumerate(example[:1] if t == 0 else example)
              for token in sorted(state.next_tokens())]
    if wanted:
        index = torch.tensor(wanted, device=scores.device)
        values = scores[index[:, 0], index[:, 1], index[:, 2]].tolist()
        for (e, beam, token), value in zip(wanted, values, strict=True):
            top[e].append((value, beam, token))
    return top


@dataclass
class Hypothesis:
    """A hypothesis that left the beam: its normalized score, tokens (BOS first), token log-probs, length."""

    score: float
    seq: Tensor  # (L + 1,)
    tok_lp: Tensor  # (L + 1,)
    length: int
    ended: bool = True  # False: held at the length limit without EOS, its constraints unmet


class ConstrainedBeams:
    """fairseq's lexically constrained beam search as a `beam_loop` strategy (see the module docstring)."""

    once_first = True

    def __init__(self, ids: HasSpecialIds, max_new: Tensor, num_beams: int, length_penalty: LengthPenalty,
                 constraints: Sequence[Sequence[Sequence[int]]], order: ConstraintOrder, start: Tensor | None) -> None:
        b, k = max_new.shape[0], num_beams
        limit, device = int(max_new.max()), max_new.device
        self.width, self.ids, self.max_new, self.length_penalty = k, ids, max_new, length_penalty
        seq = torch.full((b, k, limit + 1), ids.pad_id, dtype=torch.long, device=device)
        seq[:, :, 0] = start_tokens(start, ids.bos_id, (b, k), device)
        self.beams = Beams(seq, torch.zeros((b, k, limit + 1), device=device), torch.zeros((b, k), device=device))
        self.states = [[start_state(c, order)] * k for c in constraints]  # per active example, per beam
        self.finished: list[list[Hypothesis]] = [[] for _ in range(b)]
        self.going: list[list[Candidate]] = []
        self.work = StepBuffers()

    def prefix(self, t: int) -> Tensor:
        return self.beams.seq[:, :, : t + 1].reshape(-1, t + 1)

    def choose(self, t: int, logits: Tensor, prefix: Tensor, processors: Sequence[LogitsProcessor],
               active: Tensor) -> tuple[Tensor, Tensor]:
        a, k, eos, device = active.shape[0], self.width, self.ids.eos_id, logits.device
        at_limit = t + 1 >= self.max_new[active]
        # at an example's last step only EOS may follow, keeping its own score (fairseq's rule)
        raw_lp, scores = candidate_scores(logits, prefix, self.beams.scores, processors, at_limit, eos, "fairseq",
                                          self.work)  # (A * rows, V), (A, K, V)
        if t > 0:  # a hypothesis ends only once its constraints are met (fairseq: from the second step)
            unmet = [e * k + j for e, example in enumerate(self.states) for j, s in enumerate(example)
                     if not s.finished]
            if unmet:
                scores.view(a * k, -1)[torch.tensor(unmet, device=device), eos] = NEG_INF
        limits = at_limit.tolist()
        self.going, done = [], []
        for e, gathered in enumerate(gather_candidates(scores, self.states, t)):
            cands = allocate(gathered, self.states[e], 2 * k, len(self.states[e][0].tokens))
            ending = [c[2] == eos and c[0] != NEG_INF for c in cands]  # EOS with a finite score
            hyps = self.finished[int(active[e])]
            for score, beam, _, _ in (c for c, ends in zip(cands[:k], ending, strict=False) if ends):
                if len(hyps) < k:  # fairseq's finalize_hypos: in candidate order, K at most
                    hyps.append(self.ended(e, beam, score, raw_lp, t))
            if limits[e] and len(hyps) < k:  # constraints unmet within the limit: the beams held, without EOS
                hyps.extend(self.held(e, j, t) for j in range(k - len(hyps)))
            self.going.append([c for c, ends in zip(cands, ending, strict=True) if not ends][:k])
            done.append(len(hyps) >= k)
        done_t = torch.tensor(done, device=device)
        if bool(done_t.all()):
            return torch.zeros((a, k), dtype=torch.long, device=device), done_t
        self.beams, parent = continue_beams(self.beams, self.going, raw_lp, t)
        return parent, done_t

    def ended(self, e: int, beam: int, score: float, raw_lp: Tensor, t: int) -> Hypothesis:
        """Beam `beam` of example row `e` ending in EOS at step t, with its running score `score`."""
        tok_lp = self.beams.tok_lp[e, beam].clone()
        tok_lp[t + 1] = raw_lp[e if t == 0 else e * self.width + beam, self.ids.eos_id]
        seq = self.beams.seq[e, beam].clone()
        seq[t + 1] = self.ids.eos_id
        return Hypothesis(float(self.length_penalty(torch.tensor(score), t + 1.0)), seq, tok_lp, t + 1)

    def held(self, e: int, beam: int, t: int) -> Hypothesis:
        """Beam `beam` of example row `e` as it stands at its limit, without EOS."""
        return Hypothesis(float(self.length_penalty(self.beams.scores[e, beam], float(t))),
                          self.beams.seq[e, beam].clone(), self.beams.tok_lp[e, beam].clone(), t, ended=False)

    def moved(self, stay: Tensor, parents: Tensor) -> None:
        self.states = [[c[3] for c in self.going[i]] for i in stay.tolist()]

    def leave(self, stay: Tensor, done: Tensor, active: Tensor) -> None:
        self.beams = Beams(self.beams.seq[stay], self.beams.tok_lp[stay], self.beams.scores[stay])

    def result(self, active: Tensor) -> GenerateOutput:
        return collect(self.finished, self.width, self.ids.pad_id, self.beams.seq.shape[-1], self.max_new.device)


def continue_beams(beams: Beams, going: list[list[Candidate]], raw_lp: Tensor, t: int) -> tuple[Beams, Tensor]:
    """The beams after step t: each example's continuing candidates (A lists of K) appended to their parents.
    Returns them and (A, K) each one's parent beam. raw_lp: (A * rows, V), rows 1 on the first step."""
    a, k = beams.scores.shape
    device = beams.scores.device
    parent = torch.tensor([[c[1] for c in g] for g in going], device=device)  # (A, K)
    token = torch.tensor([[c[2] for c in g] for g in going], device=device)
    seq = beams.seq.gather(1, parent[:, :, None].expand_as(beams.seq)).clone()
    seq[:, :, t + 1] = token
    tok_lp = beams.tok_lp.gather(1, parent[:, :, None].expand_as(beams.tok_lp)).clone()
    rows = torch.arange(a, device=device)[:, None] * (k if t > 0 else 1) + (parent if t > 0 else 0)  # rows of raw_lp
    tok_lp[:, :, t + 1] = raw_lp[rows, token]
    return Beams(seq, tok_lp, torch.tensor([[c[0] for c in g] for g in going], device=device)), parent


def collect(finished: list[list[Hypothesis]], k: int, pad: int, width: int, device: torch.device) -> GenerateOutput:
    """Every example's K hypotheses, best first (finished ones before any held at the limit), as generate's
    output: (B, K, width - 1) tokens after BOS."""
    b = len(finished)
    out_seq = torch.full((b, k, width), pad, dtype=torch.long, device=device)
    out_lp = torch.zeros((b, k, width), device=device)
    out_scores = torch.full((b, k), NEG_INF, device=device)
    out_len = torch.zeros((b, k), dtype=torch.long, device=device)
    for ex, hyps in enumerate(finished):
        for j, h in enumerate(sorted(hyps, key=lambda h: (not h.ended, -h.score))[:k]):
            out_seq[ex, j], out_lp[ex, j], out_scores[ex, j], out_len[ex, j] = h.seq, h.tok_lp, h.score, h.length
    return GenerateOutput(out_seq[:, :, 1:], out_scores, out_lp[:, :, 1:], out_len)
