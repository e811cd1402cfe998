"""Search strategies over a model (`seqlab.model.Model`): greedy/sampling (one token per row) and beam search.

Both work on a whole batch with beams folded into the batch axis, reuse the
model's KV cache, and drop examples that are done from the batch (their cache
rows too), so finished work costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from seqlab.constants import ForceEOS, HasSpecialIds
from seqlab.decoding.coverage import Coverage
from seqlab.decoding.processors import NEG_INF, Ban, LogitsProcessor, apply, for_examples, split_bans
from seqlab.decoding.sampling import gumbel_noise
from seqlab.model import DecoderCache, Model
from seqlab.model.cache import in_place_order, shared_prefix

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
        if force_eos is not None and at_limit is not None:
            scores = force_eos_(scores.clone() if scores is logits else scores, at_limit, eos, force_eos)
        if keys is not None:
            scores = scores.double() + gumbel_noise(seed, keys[active], t, scores.shape[-1])
        next_tok = scores.argmax(dim=-1)  # (A,)
        if force_eos is not None and at_limit is not None:  # EOS even where fairseq's rule left no finite score
            next_tok = torch.where(at_limit, eos, next_tok)
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
        running &= next_tok != eos if at_limit is None else (next_tok != eos) & ~at_limit
        finished = int((~running).sum())
        all_running = finished == 0
        if finished == running.numel():
            break
        if finished * COMPACT_EVERY >= running.numel():  # drop finished rows once they are 1/8 of the batch
            keep = in_place_order(running)
            active, prefix, running = active[keep], prefix[keep], running[keep]
            cache.compact_(keep)
    return GenerateOutput(tokens[:, None], logprobs[:, None].sum(-1), logprobs[:, None], lengths[:, None])


def start_tokens(start: Tensor | None, bos: int, shape: tuple[int, ...], device: torch.device) -> Tensor:
    """(B, ...) the first decoder input of every row: the decoder start token, or each source's own `start`
    (B,) (a causal LM continues its prompt's last token)."""
    if start is None:
        return torch.full(shape, bos, dtype=torch.long, device=device)
    return start.view(-1, *([1] * (len(shape) - 1))).expand(shape).clone()


def _rows(x: Tensor, index: Tensor) -> Tensor:
    """x (A, C, ...) at candidate positions index (A, K): (A, K, ...)."""
    return x.gather(1, index.view(*index.shape, *([1] * (x.dim() - 2))).expand(-1, -1, *x.shape[2:]))


def _pick(old: Tensor, new: Tensor, best: Tensor) -> Tensor:
    """Rows `best` (A, K) of old (A, K, ...) and new (A, C, ...) concatenated along dim 1."""
    return _rows(torch.cat([old, new], 1), best)


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


def expand(beams: Beams, scores: Tensor, raw_lp: Tensor, t: int, eos: int, at_limit: Tensor) -> Candidates:
    """scores (A, K, V) processed log-probs + running scores -> the top 2K candidates.

    raw_lp: (A * K, V) unwarped log-probs of each beam's next token, or (A, V) where the beams are all
    the same (the first step)."""
    a, k, vocab = scores.shape
    top_scores, top_idx = torch.topk(scores.view(a, k * vocab), 2 * k)  # (A, C)
    src_beam, tok = top_idx // vocab, top_idx % vocab
    seq = _rows(beams.seq, src_beam)
    seq[:, :, t + 1] = tok
    tok_lp = _rows(beams.tok_lp, src_beam)
    tok_lp[:, :, t + 1] = raw_lp.view(a, -1).gather(1, top_idx if raw_lp.shape[0] == a * k else tok)
    return Candidates(seq, tok_lp, top_scores, src_beam, (tok == eos) | at_limit[:, None])


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


def beam_scores(logits: Tensor, prefix: Tensor, running: Tensor, head: Sequence[LogitsProcessor],
                bans: Sequence[Ban], work: StepBuffers) -> tuple[Tensor, Tensor]:
    """Hugging Face's candidate scores: log-softmax, the processors, plus each beam's running score, then the
    bans. (raw log-probs (A * rows, V), scores (A, K, V)); rows is 1 on the first step (first_step_once),
    whose single row stands for all K beams (the others' running scores are -inf).

    Speed-ups with the same numbers: the step's tensors reuse buffers (StepBuffers), and the bans act in
    place after the add, where HF applies them before it (a banned score is -inf either way)."""
    a, k = running.shape
    rows = logits.shape[0] // a
    decoded = prefix[::k] if rows == 1 else prefix
    raw_lp = torch.log_softmax(logits, dim=-1, out=work.get("raw_lp", logits))
    processed = apply(head, decoded, raw_lp)
    scores = torch.add(processed.view(a, rows, -1), running[:, :, None],
                       out=work.get("scores", logits).view(a, k, -1) if rows == k else None)  # (A, K, V)
    flat = scores.view(a * k, -1)
    for ban in bans:
        ban.ban_(prefix, flat)
    return raw_lp, scores


def beam_search(
    step: StepFn, cache: DecoderCache, *, ids: HasSpecialIds, max_new: Tensor, num_beams: int,
    length_penalty: LengthPenalty, early_stopping: bool | str, processors: Sequence[LogitsProcessor],
    force_eos: ForceEOS | None = None, on_step: Callable[[int, Tensor, Candidates], None] | None = None,
    coverage: Coverage | None = None, start: Tensor | None = None,
) -> GenerateOutput:
    """Hugging Face's beam search (see DecodingConfig), with done examples dropped from the batch.

    on_step(t, active, candidates), if given, sees every step's 2K candidates (for traces). coverage, if
    given (recording the model's attention), penalizes each hypothesis's final score (decoding.coverage).

    cache holds one row per example: all its beams start the same, so the first step runs once per
    example (as CTranslate2's does) and then the cache grows to B * num_beams rows, example-major.
    max_new: (B,) per-example limits. Each step: expand the running beams to 2K candidates, keep the
    best K that did not stop, move stopped ones into the finished set, then stop examples that cannot
    improve.
    """
    b, k = max_new.shape[0], num_beams
    limit, device = int(max_new.max()), max_new.device
    seq = torch.full((b, k, limit + 1), ids.pad_id, dtype=torch.long, device=device)
    seq[:, :, 0] = start_tokens(start, ids.bos_id, (b, k), device)
    start_scores = torch.zeros((b, k), device=device)
    start_scores[:, 1:] = NEG  # all beams start identical: expand only the first
    beams = Beams(seq, torch.zeros((b, k, limit + 1), device=device), start_scores)
    # The examples still searching, and what the search keeps for them, row for row with `beams` (their
    # finished sets too): an example's state moves when an example leaves, not at every step.
    active, limits = torch.arange(b, device=device), max_new
    fin, improvable = Finished.empty(seq, beams.tok_lp), torch.ones(b, dtype=torch.bool, device=device)
    out: Finished | None = None  # every example's finished set, once one has left: written as they leave
    work = StepBuffers()
    for t in range(limit):
        a = active.shape[0]
        head, bans = split_bans(for_examples(processors, active))
        prefix = beams.seq[:, :, : t + 1].reshape(a * k, t + 1)  # the beams' tokens: the cache's rows
        logits, cache = first_step_once(step, prefix, cache, t, k)
        covered = coverage.after_step() if coverage is not None else None  # (A * K, S)
        raw_lp, scores = beam_scores(logits, prefix, beams.scores, head, bans, work)  # (A * rows, V), (A, K, V)
        at_limit = t + 1 >= limits  # (A,)
        if force_eos is not None:
            force_eos_(scores.view(a * k, -1), at_limit.repeat_interleave(k), ids.eos_id, force_eos,
                       running=beams.scores.view(-1))
        cand = expand(beams, scores, raw_lp, t, ids.eos_id, at_limit)
        if on_step is not None:
            on_step(t, active, cand)
        beams, origin = select_running(cand, k)
        accepting = improvable & ~fin.is_fin.all(dim=1) if early_stopping is True else improvable
        penalty = coverage.penalty(covered, cand.source_beam) if coverage is not None else None
        finalize(fin, None, cand, t, length_penalty, accepting, penalty)
        improvable = improvable & ~is_done(fin, None, beams.scores[:, 0], t, limits, length_penalty, early_stopping)
        done = ~improvable | at_limit
        if bool(done.all()):
            break
        stay, parents = follow_parents(cache, prefix, origin, done)
        if coverage is not None:
            coverage.follow(covered, parents)
        if stay.shape[0] < a:
            leaving = done.nonzero().squeeze(1)
            if out is None:
                out = Finished.empty(seq, torch.zeros(seq.shape, device=device))  # seq: still BOS and padding
            out.put_(active[leaving], fin.rows(leaving))
            active, fin, improvable, limits = active[stay], fin.rows(stay), improvable[stay], limits[stay]
            beams = Beams(beams.seq[stay], beams.tok_lp[stay], beams.scores[stay])
    if out is None:  # no example left before the end: `active` is still every example, in order
        out = fin
    else:
        out.put_(active, fin)
    within = torch.arange(limit, device=device)[None, None, :] < out.lengths[:, :, None]
    return GenerateOutput(out.seq[:, :, 1:], out.scores, out.tok_lp[:, :, 1:] * within, out.lengths)
