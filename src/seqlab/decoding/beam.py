"""Beam search: one loop, its strategies, and the state and steps they share.

`beam_loop` owns what every beam search does alike at each step: it binds the per-example processors to the
examples still searching, runs the decoder step (once per example on the first step where all of an example's
beams start the same, as CTranslate2 does), moves the cache to each new beam's parent, and drops the examples
that are done, with their cache rows. A `BeamStrategy` owns the rest, fairseq's `Search.step`: how it chooses
the next beams from the step's logits, what it keeps finished, and when an example is done. Every strategy
scores its candidates through `candidate_scores`, the one place where processors, bans and forced EOS act on
a beam's scores. Three strategies: Hugging Face's beam search (`PlainBeams`, here), diverse beam search
(`decoding.diverse`) and fairseq's lexically constrained beam search (`decoding.constrained`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from seqlab.constants import ForceEOS, HasSpecialIds
from seqlab.decoding.coverage import Coverage
from seqlab.decoding.processors import LogitsProcessor, apply, for_examples, split_bans
from seqlab.decoding.search import (
    NEG,
    GenerateOutput,
    LengthPenalty,
    StepBuffers,
    StepFn,
    ends,
    force_eos_,
    start_tokens,
)
from seqlab.model import DecoderCache
from seqlab.model.cache import in_place_order, shared_prefix


def _rows(x: Tensor, index: Tensor) -> Tensor:
    """x (A, C, ...) at candidate positions index (A, K): (A, K, ...)."""
    return x.gather(1, index.view(*index.shape, *([1] * (x.dim() - 2))).expand(-1, -1, *x.shape[2:]))


def _pick(old: Tensor, new: Tensor, best: Tensor) -> Tensor:
    """Rows `best` (A, K) of old (A, K, ...) and new (A, C, ...) concatenated along dim 1."""
    return _rows(torch.cat([old, new], 1), best)


@dataclass
class Beams:
    """The state of beam search for the examples still searching (A of them, K beams each)."""

    seq: Tensor  # (A, K, L + 1) BOS + tokens of each running beam
    tok_lp: Tensor  # (A, K, L + 1) unwarped log-prob of each token
    scores: Tensor  # (A, K) running score: sum of processed log-probs


@dataclass
class Finished:
    """The best K finished hypotheses per example (all B examples), NEG where there are fewer."""

    seq: Tensor  # (B, K, L + 1)
    tok_lp: Tensor  # (B, K, L + 1)
    scores: Tensor  # (B, K) normalized score
    lengths: Tensor  # (B, K)
    is_fin: Tensor  # (B, K) bool: a real hypothesis in this slot

    @classmethod
    def empty(cls, seq: Tensor, tok_lp: Tensor) -> Finished:
        """No hypothesis yet, in the shape of the starting beams seq, tok_lp (R, K, L + 1)."""
        r, k = seq.shape[:2]
        return cls(seq.clone(), tok_lp.clone(), torch.full((r, k), NEG, device=seq.device),
                   torch.zeros((r, k), dtype=torch.long, device=seq.device),
                   torch.zeros((r, k), dtype=torch.bool, device=seq.device))

    def rows(self, index: Tensor | None) -> Finished:
        """The sets at rows `index` (copies), or these very sets where index is None."""
        if index is None:
            return self
        return Finished(self.seq[index], self.tok_lp[index], self.scores[index], self.lengths[index],
                        self.is_fin[index])

    def put_(self, index: Tensor | None, sets: Finished) -> None:
        """In place: rows `index` become `sets`, or all of them where index is None."""
        for name in ("seq", "tok_lp", "scores", "lengths", "is_fin"):
            if index is None:
                setattr(self, name, getattr(sets, name))
            else:
                getattr(self, name)[index] = getattr(sets, name)


@dataclass
class Candidates:
    """The top 2K continuations of one step (fairseq's `Search.step`), per example."""

    seq: Tensor  # (A, C, L + 1)
    tok_lp: Tensor  # (A, C, L + 1)
    scores: Tensor  # (A, C) running score
    source_beam: Tensor  # (A, C) the beam each continues
    stops: Tensor  # (A, C) bool: ends in EOS or at the length limit


def expand(beams: Beams, scores: Tensor, raw_lp: Tensor, t: int, ids: HasSpecialIds, at_limit: Tensor) -> Candidates:
    """scores (A, K, V) processed log-probs + running scores -> the top 2K candidates.

    raw_lp: (A * K, V) unwarped log-probs of each beam's next token, or (A, V) where the beams are all
    the same (the first step). A candidate ending in any of `ids`' end tokens is finished."""
    a, k, vocab = scores.shape
    top_scores, top_idx = torch.topk(scores.view(a, k * vocab), 2 * k)  # (A, C)
    src_beam, tok = top_idx // vocab, top_idx % vocab
    seq = _rows(beams.seq, src_beam)
    seq[:, :, t + 1] = tok
    tok_lp = _rows(beams.tok_lp, src_beam)
    tok_lp[:, :, t + 1] = raw_lp.view(a, -1).gather(1, top_idx if raw_lp.shape[0] == a * k else tok)
    return Candidates(seq, tok_lp, top_scores, src_beam, ends(tok, ids) | at_limit[:, None])


def select_running(cand: Candidates, k: int) -> tuple[Beams, Tensor]:
    """The best K candidates that did not stop continue; returns them and the beam each came from."""
    keep = torch.topk(cand.scores + cand.stops.float() * NEG, k)[1]  # (A, K)
    beams = Beams(_rows(cand.seq, keep), _rows(cand.tok_lp, keep), cand.scores.gather(1, keep))
    return beams, cand.source_beam.gather(1, keep)


def finalize(fin: Finished, rows: Tensor | None, cand: Candidates, t: int, length_penalty: LengthPenalty,
             accepting: Tensor, penalty: Tensor | None = None) -> None:
    """Stopped candidates among the top K join the finished set if they beat it (fairseq's `finalize_hypos`).

    rows: the candidates' finished sets (`merge_finished`); accepting: (A,) whether each example still takes
    new hypotheses; penalty: (A, C) subtracted from the candidates' normalized scores (a coverage penalty) or
    None.
    """
    k = fin.scores.shape[1]
    just_fin = cand.stops.clone()
    just_fin[:, k:] = False
    merge_finished(fin, rows, cand.seq, cand.tok_lp, cand.scores, t, length_penalty, just_fin & accepting[:, None],
                   penalty)


def merge_finished(fin: Finished, rows: Tensor | None, seq: Tensor, tok_lp: Tensor, scores: Tensor, t: int,
                   length_penalty: LengthPenalty, new: Tensor, penalty: Tensor | None = None) -> None:
    """Hypotheses of length t + 1 where `new` (A, C) join the finished sets `rows` (A,) if they beat them;
    each keeps its best K by length-normalized score, less `penalty` (A, C) where given. rows=None: `fin` holds
    these A examples' sets and no others, in order (beam search keeps its own so: no gather and scatter of
    every set at every step).

    seq, tok_lp: (A, C, L + 1); scores: (A, C) running scores (sums of processed log-probs).
    """
    k = fin.scores.shape[1]
    final = length_penalty(scores, float(t + 1))
    if penalty is not None:
        final = final - penalty
    new_scores = final + (~new).float() * NEG
    old = fin.rows(rows)
    merged = torch.cat([old.scores, new_scores], dim=1)
    best = torch.topk(merged, k)[1]  # (A, K)
    fin.put_(rows, Finished(_pick(old.seq, seq, best), _pick(old.tok_lp, tok_lp, best), merged.gather(1, best),
                            _pick(old.lengths, torch.full_like(new, t + 1, dtype=torch.long), best),
                            _pick(old.is_fin, new, best)))


def is_done(fin: Finished, rows: Tensor | None, best: Tensor, t: int, max_new: Tensor, length_penalty: LengthPenalty,
            early_stopping: bool | str) -> Tensor:
    """(A,) HF's `BeamHypotheses.is_done` for the finished sets `rows` (None: all of fin's, `merge_finished`),
    shared by beam and diverse beam search: the set is full and, unless early_stopping=True, the `best` (A,)
    running score cannot beat its worst hypothesis. `best` is scored at the current length, or with
    early_stopping="never" (and length_penalty > 0) at the maximum length `max_new` (A,), the most it could
    still gain.
    """
    sets = fin.rows(rows)
    full = sets.is_fin.all(dim=1)
    if early_stopping is True:
        return full
    length = max_new.float() if early_stopping == "never" and length_penalty.alpha > 0 else float(t + 1)
    return full & (sets.scores.min(dim=1)[0] >= length_penalty(best, length))


def follow_parents(cache: DecoderCache, prefix: Tensor, origin: Tensor, done: Tensor) -> tuple[Tensor, Tensor]:
    """Move the cache after a beam step: each beam takes its parent's keys/values, and examples that are
    done leave the batch, the last ones taking their slots (`in_place_order`). Returns the examples that
    stay, in their new order, and (A' * K,) the row of each staying beam's parent among the step's rows
    (what other per-beam state follows). A beam that stays in its slot keeps the positions it shares with
    its parent.

    prefix: (A * K, t + 1) the rows' tokens before the step; origin: (A, K) each beam's parent among its
    example's rows; done: (A,) bool.
    """
    k = origin.shape[1]
    stay = in_place_order(~done)
    if stay.shape[0] == done.shape[0]:  # every example stays in its slot (most steps): only beams move
        parents = (origin + torch.arange(0, origin.numel(), k, device=origin.device)[:, None]).view(-1)
        cache.compact_(parents, shared_prefix(prefix, parents), same_sources=True)
        return stay, parents
    parents = (stay[:, None] * k + origin[stay]).view(-1)
    in_slot = (stay == torch.arange(stay.shape[0], device=stay.device)).repeat_interleave(k)
    cache.compact_(parents, shared_prefix(prefix, parents) * in_slot)
    return stay, parents


def first_step_once(step: StepFn, prefix: Tensor, cache: DecoderCache, t: int, k: int) -> tuple[Tensor, DecoderCache]:
    """A speed-up: every beam starts as BOS, so the first step decodes one row per example (as CTranslate2's
    does) and then grows the cache to its K beams; later steps decode every beam. prefix: (A * K, t + 1)."""
    decoded = prefix[::k] if t == 0 else prefix  # (A * rows, t + 1)
    logits, cache = step(decoded[:, -1], cache)  # (A * rows, V)
    if t == 0:
        cache.expand_(k)
    return logits, cache


def candidate_scores(logits: Tensor, prefix: Tensor, running: Tensor, processors: Sequence[LogitsProcessor],
                     at_limit: Tensor, eos: int, force_eos: ForceEOS | None, work: StepBuffers,
                     penalty: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Hugging Face's candidate scores of beam search: the log-softmax of the logits, less `penalty` (diverse
    beam search's Hamming term, (A * rows, V), HF's first processor there), the processors, plus each beam's
    running score; then the bans and, for rows at their limit (`at_limit` (A,)), forced EOS (`force_eos_`).
    Returns (raw log-probs (A * rows, V), scores (A, K, V)); rows is 1 on a first step decoded once per example
    (`first_step_once`), whose single row stands for all K beams (the others' running scores are NEG).

    Speed-ups with the same numbers: the step's tensors reuse buffers (StepBuffers), and the bans and forced
    EOS act in place after the add, where HF applies them before it (a banned score is -inf either way, a
    forced EOS scores 0 + the running score, and fairseq's keeps its own log-prob plus it)."""
    a, k = running.shape
    rows = logits.shape[0] // a
    head, bans = split_bans(processors)
    decoded = prefix[::k] if rows == 1 else prefix
    raw_lp = torch.log_softmax(logits, dim=-1, out=work.get("raw_lp", logits))
    processed = apply(head, decoded, raw_lp if penalty is None else raw_lp - penalty)
    scores = torch.add(processed.view(a, rows, -1), running[:, :, None],
                       out=work.get("scores", logits).view(a, k, -1) if rows == k else None)  # (A, K, V)
    flat = scores.view(a * k, -1)
    for ban in bans:
        ban.ban_(prefix, flat)
    if force_eos is not None:
        force_eos_(flat, at_limit.repeat_interleave(k), eos, force_eos, running=running.reshape(-1))
    return raw_lp, scores


class BeamStrategy(Protocol):
    """How a beam search chooses its beams, for `beam_loop`. It holds the state of the A examples still
    searching (K = `width` beams each, the cache's rows example-major) and of those that left."""

    width: int  # beams per example
    once_first: bool  # every beam of an example starts the same: the first step decodes one row per example

    def prefix(self, t: int) -> Tensor:
        """(A * K, t + 1) the running beams' tokens so far: the cache's rows."""
        ...

    def choose(self, t: int, logits: Tensor, prefix: Tensor, processors: Sequence[LogitsProcessor],
               active: Tensor) -> tuple[Tensor, Tensor]:
        """Step t's choice from its logits (A * rows, V), with the processors bound to the `active` (A,)
        examples: ((A, K) each new beam's parent among its example's beams, (A,) bool: the example is done)."""
        ...

    def moved(self, stay: Tensor, parents: Tensor) -> None:
        """After the cache moved (`follow_parents`): the examples that stay, (A' * K,) each beam's parent row."""
        ...

    def leave(self, stay: Tensor, done: Tensor, active: Tensor) -> None:
        """The examples `done` (A,) leave; the state keeps rows `stay` (A',), in that order."""
        ...

    def result(self, active: Tensor) -> GenerateOutput:
        """Every example's hypotheses, best first, once the search stopped with `active` still searching."""
        ...


def beam_loop(strategy: BeamStrategy, step: StepFn, cache: DecoderCache, processors: Sequence[LogitsProcessor],
              limit: int, examples: int, device: torch.device) -> GenerateOutput:
    """Run `strategy` for at most `limit` steps over `examples` sources (see the module docstring)."""
    active = torch.arange(examples, device=device)
    for t in range(limit):
        prefix = strategy.prefix(t)
        if strategy.once_first:
            logits, cache = first_step_once(step, prefix, cache, t, strategy.width)
        else:
            logits, cache = step(prefix[:, -1], cache)
        origin, done = strategy.choose(t, logits, prefix, for_examples(processors, active), active)
        if bool(done.all()):
            break
        stay, parents = follow_parents(cache, prefix, origin, done)
        strategy.moved(stay, parents)
        if stay.shape[0] < active.shape[0]:
            strategy.leave(stay, done, active)
            active = active[stay]
    return strategy.result(active)


class PlainBeams:
    """Hugging Face's beam search (see DecodingConfig) as a `beam_loop` strategy. Each step: expand the
    running beams to 2K candidates, keep the best K that did not stop, move stopped ones into the finished
    set, then stop examples that cannot improve (`is_done`). An optional coverage penalty (decoding.coverage,
    recording the model's attention) penalizes each hypothesis's final score."""

    once_first = True

    def __init__(self, ids: HasSpecialIds, max_new: Tensor, num_beams: int, length_penalty: LengthPenalty,
                 early_stopping: bool | str, force_eos: ForceEOS | None, start: Tensor | None,
                 on_step: Callable[[int, Tensor, Candidates], None] | None, coverage: Coverage | None) -> None:
        b, k = max_new.shape[0], num_beams
        limit, device = int(max_new.max()), max_new.device
        self.width, self.ids, self.length_penalty, self.early_stopping = k, ids, length_penalty, early_stopping
        self.force_eos, self.on_step, self.coverage = force_eos, on_step, coverage
        self.start_seq = torch.full((b, k, limit + 1), ids.pad_id, dtype=torch.long, device=device)
        self.start_seq[:, :, 0] = start_tokens(start, ids.bos_id, (b, k), device)
        start_scores = torch.zeros((b, k), device=device)
        start_scores[:, 1:] = NEG  # all beams start identical: expand only the first
        self.beams = Beams(self.start_seq, torch.zeros((b, k, limit + 1), device=device), start_scores)
        # What the search keeps for the examples still searching, row for row with `beams` (their finished
        # sets too): an example's state moves when an example leaves, not at every step.
        self.limits = max_new
        self.fin = Finished.empty(self.start_seq, self.beams.tok_lp)
        self.improvable = torch.ones(b, dtype=torch.bool, device=device)
        self.out: Finished | None = None  # every example's finished set, once one has left: written as they leave
        self.work, self.covered = StepBuffers(), None

    def prefix(self, t: int) -> Tensor:
        return self.beams.seq[:, :, : t + 1].reshape(-1, t + 1)

    def choose(self, t: int, logits: Tensor, prefix: Tensor, processors: Sequence[LogitsProcessor],
               active: Tensor) -> tuple[Tensor, Tensor]:
        k, lp = self.width, self.length_penalty
        self.covered = self.coverage.after_step() if self.coverage is not None else None  # (A * K, S)
        at_limit = t + 1 >= self.limits  # (A,)
        raw_lp, scores = candidate_scores(logits, prefix, self.beams.scores, processors, at_limit, self.ids.eos_id,
                                          self.force_eos, self.work)  # (A * rows, V), (A, K, V)
        cand = expand(self.beams, scores, raw_lp, t, self.ids, at_limit)
        if self.on_step is not None:
            self.on_step(t, active, cand)
        self.beams, origin = select_running(cand, k)
        accepting = self.improvable & ~self.fin.is_fin.all(dim=1) if self.early_stopping is True else self.improvable
        penalty = self.coverage.penalty(self.covered, cand.source_beam) if self.coverage is not None else None
        finalize(self.fin, None, cand, t, lp, accepting, penalty)
        self.improvable = self.improvable & ~is_done(self.fin, None, self.beams.scores[:, 0], t, self.limits, lp,
                                                     self.early_stopping)
        return origin, ~self.improvable | at_limit

    def moved(self, stay: Tensor, parents: Tensor) -> None:
        if self.coverage is not None:
            self.coverage.follow(self.covered, parents)

    def leave(self, stay: Tensor, done: Tensor, active: Tensor) -> None:
        leaving = done.nonzero().squeeze(1)
        if self.out is None:  # the starting tokens: still BOS and padding
            self.out = Finished.empty(self.start_seq, torch.zeros(self.start_seq.shape, device=stay.device))
        self.out.put_(active[leaving], self.fin.rows(leaving))
        self.fin, self.improvable, self.limits = self.fin.rows(stay), self.improvable[stay], self.limits[stay]
        self.beams = Beams(self.beams.seq[stay], self.beams.tok_lp[stay], self.beams.scores[stay])

    def result(self, active: Tensor) -> GenerateOutput:
        out = self.fin
        if self.out is not None:  # else no example left before the end: `active` is still every one, in order
            self.out.put_(active, self.fin)
            out = self.out
        limit = out.seq.shape[-1] - 1
        within = torch.arange(limit, device=out.seq.device)[None, None, :] < out.lengths[:, :, None]
        return GenerateOutput(out.seq[:, :, 1:], out.scores, out.tok_lp[:, :, 1:] * within, out.lengths)


def beam_search(
    step: StepFn, cache: DecoderCache, *, ids: HasSpecialIds, max_new: Tensor, num_beams: int,
    length_penalty: LengthPenalty, early_stopping: bool | str, processors: Sequence[LogitsProcessor],
    force_eos: ForceEOS | None = None, on_step: Callable[[int, Tensor, Candidates], None] | None = None,
    coverage: Coverage | None = None, start: Tensor | None = None,
) -> GenerateOutput:
    """Hugging Face's beam search (`PlainBeams`), with done examples dropped from the batch.

    cache holds one row per example (the first step grows it to B * num_beams rows, example-major);
    max_new: (B,) per-example limits; start: (B,) each example's first decoder input (None: BOS).
    on_step(t, active, candidates), if given, sees every step's 2K candidates (for traces).
    """
    strategy = PlainBeams(ids, max_new, num_beams, length_penalty, early_stopping, force_eos, start, on_step,
                          coverage)
    return beam_loop(strategy, step, cache, processors, int(max_new.max()), max_new.shape[0], max_new.device)
