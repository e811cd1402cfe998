"""Speculative greedy search and sampling (Leviathan et al. 2023; Chen et al. 2023), batched and exact.

A draft proposes up to k tokens per row; the model reads the row's last token and the proposals in one
decoder call and keeps the longest run of proposals it would itself have chosen, then its own next token:
1 to k + 1 tokens per call. Each row keeps its own number: the positions of the proposals it rejected become
holes in the cache (`DecoderCache.valid`), masked out of every key, and each token's position counts the kept
tokens before it, so no row waits on another's rejections (Hugging Face's assisted generation and prompt
lookup decode one sequence at a time).

Exact by construction. At every position the model's choice is the one plain decoding makes there
(`search.sample_or_greedy`): the same processors on the same prefix (rows grouped by length, since processors
read (rows, length) prefixes), forced EOS at the same step, and for sampling the same keyed Gumbel noise of
that step (decoding.sampling). A sampled token is the argmax of the processed scores plus noise keyed on
(seed, row, step, token), so the model's choice under a draft is the very token plain sampling draws: the
samples equal plain sampling's token for token, which keeps the distribution a fortiori. The draft model draws
its proposals with the same noise (the Gumbel-max coupling), so it agrees with the model wherever their
distributions are close. What can differ is rounding: verifying k + 1 positions in one call sums in another
order than k + 1 single steps, which can turn a near-tie (within ~1e-6).

Drafts (`decoding.draft`): `lookup`, Hugging Face's prompt lookup (`prompt_lookup_num_tokens`, Saxena 2023):
the tokens that followed the earliest earlier occurrence of the row's last n tokens (n from
`decoding.lookup_ngram` down to 1) in the source, decoder start and output so far, cut before an EOS; or
`ckpt:PATH`, any seqlab model with the same target vocabulary and special ids, decoding its own cache.
`decoding.draft_tokens` is k; `draft_schedule=adaptive` grows a row's k by 2 after a call that kept all its
proposals and shrinks it by 1 otherwise (Hugging Face's `heuristic` schedule, per row), up to 2k: a batch's call
verifies as many positions as its widest row proposes, so one row's long run costs every row (Hugging Face
decodes one sequence and has no bound).

Where proposing pays is the machine's and the batch's: a call verifying k + 1 positions a row reads the weights
once, and costs about one plain step where the products are bound by reading them (few rows, weights packed
for the CPU), but up to k + 1 steps where they are bound by arithmetic (many rows; on a 2-core AVX2 CPU from
about 8). `decoding.draft_positions=paying` (the default) measures it (`Pacing`): from the calls' seconds
against the positions they verified, what one more position costs, and from each row's share of proposals kept
so far, which proposals are likely enough to be kept to pay for it; the others are not verified (not computed:
every model's output layer, and a one-stack model's layers, run on a call's real positions only). Where none
pays, the batch steps as plain greedy search (or sampling) does, through the plain decoder path while no row
has a hole yet (a cache keeps no validity record until a call verifies a proposal). The costs are the model's
and the machine's, not the batch's: a process keeps them per model, setting and batch size (`pacing_for`), so a
run's first batch pays the measuring calls and its later batches start from what it measured; a later batch
whose first call would verify no proposal is decoded by plain greedy search (or sampling) itself
(`Pacing.pays`), without the speculative loop's own work.
`draft_positions=all` verifies every proposal. Outputs are the same either way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol
from weakref import WeakKeyDictionary

import torch
import torch.nn.functional as F
from torch import Tensor

from seqlab.config import ConfigError
from seqlab.constants import ForceEOS, HasSpecialIds
from seqlab.decoding.processors import LogitsProcessor, apply, for_examples
from seqlab.decoding.search import GenerateOutput, among, choose_tokens, ends, start_tokens
from seqlab.model import DecoderCache, Model, ModelConfig
from seqlab.model.cache import in_place_order


@dataclass
class SpeculativeStats:
    """What a speculative search did, summed over its batches (the bench reads it)."""

    calls: int = 0  # the model's decoder calls, one per row and round (rows in a call summed)
    proposed: int = 0  # draft tokens proposed
    accepted: int = 0  # of them, kept
    tokens: int = 0  # tokens generated
    draft_seconds: float = 0.0  # time spent proposing

    @property
    def acceptance(self) -> float:
        """The share of proposed tokens kept."""
        return self.accepted / self.proposed if self.proposed else 0.0

    def add_plain(self, tokens: int) -> None:
        """Count a batch decoded without proposing (`Pacing.pays`): one decoder call a row and token."""
        self.calls += tokens
        self.tokens += tokens

    @property
    def tokens_per_call(self) -> float:
        """Tokens generated per row and decoder call (1 is plain decoding)."""
        return self.tokens / self.calls if self.calls else 0.0


@dataclass
class Pacing:
    """Which proposals a call verifies under `decoding.draft_positions=paying`: those expected to save the batch more
    time than they add to the call, the likeliest to be kept first, from costs measured on its own calls.

    A call verifying R positions in all (each of its A rows' own token, then their proposals) takes about
    a + b R seconds, plus c where it verifies any proposal (the wider call: its masks, its packing, the choice at
    each position, the draft): b is next to nothing where the products are bound by reading the weights, a
    row's share of the step where they are bound by arithmetic. Row r's j-th proposal is kept with chance p_r^j
    (after all before it), p_r its share kept so far with one kept and one rejected counted in (a new row: 1/2).
    A batch generates the same tokens however its calls share them, so a kept proposal saves a row's step that a
    later call need not take: while the batch's rows decode together, a plain step's seconds per row,
    s = (a + b A) / A. Verifying the n likeliest proposals saves s times their chances summed and adds
    b n + c seconds to the call; the call takes the n (0 included) that saves most. (Taking instead the n that
    makes this call's tokens per second highest stops where the next proposal's chance falls below the call's
    own rate, already above a plain step's, and leaves out proposals that would still save more than they
    cost.) a, b and c are fitted by least squares to the calls so far (the process's, for this model, setting
    and batch size: `pacing_for`): the first call is a plain step, the next ones verify A/2 then A proposals (one a
    row, or more where A < 2) until the proposing calls' positions spread over a quarter of A; where proposing
    does not pay, those are all a run pays. The line holds only as far as it was measured (a product of few
    rows takes another kernel than a wide one, so the time per position jumps where the rows cross it): a call
    verifies at most A/2 positions more than the widest call so far, so the range widens a step at a time, each
    step measured before the next is taken."""

    WIDEN: ClassVar[float] = 0.5  # positions a call may verify beyond the widest measured, a share of its rows
    KEPT: ClassVar[int] = 32  # the latest plain and the latest proposing calls the fit reads, of each kind
    clock: Callable[[], float] = field(default=time.perf_counter, repr=False)
    calls: list[tuple[int, int, float]] = field(default_factory=list)  # (rows, positions, seconds) of each call

    def observe(self, rows: int, positions: int, seconds: float) -> None:
        """Add a call; the oldest of its kind (plain or proposing) leaves past `KEPT`, so the fit follows the
        machine as it goes and keeps its proposing calls where proposing stopped paying."""
        self.calls.append((rows, positions, seconds))
        same = [i for i, (a, r, _) in enumerate(self.calls) if (r > a) == (positions > rows)]
        if len(same) > self.KEPT:
            del self.calls[same[0]]

    @property
    def proposing(self) -> list[int]:
        """The positions of the calls so far that verified a proposal."""
        return [r for a, r, _ in self.calls if r > a]

    def fit(self, rows: int) -> tuple[float, float, float] | None:
        """(a, b, c) of the calls so far, or None before a plain call and proposing calls whose positions spread
        over a quarter of `rows`."""
        proposing = self.proposing
        if len(proposing) == len(self.calls) or not proposing or max(proposing) - min(proposing) < max(1, rows / 4):
            return None
        x = torch.tensor([[1.0, r, float(r > a)] for a, r, _ in self.calls], dtype=torch.float64)
        y = torch.tensor([[t] for _, _, t in self.calls], dtype=torch.float64)
        a, b, c = torch.linalg.lstsq(x, y).solution[:, 0].tolist()
        return a, max(b, 0.0), max(c, 0.0)

    def pays(self, max_new: Tensor, draft_tokens: int) -> bool:
        """Whether a batch of rows with these limits (A,) verifies any proposal in its first call: True until the
        costs are measured (its calls measure them), then whether any of its new rows' proposals pays at a new
        row's chance. Where none does, no later call of the batch would verify one either (a row's chance moves
        only with proposals verified), so the batch is plain decoding's: its own loop, none of the speculative
        call's work."""
        rows = max_new.shape[0]
        if self.fit(rows) is None:
            return True
        none = torch.zeros_like(max_new)
        k = draft_counts(torch.full_like(max_new, draft_tokens), none, max_new)
        return bool(self.counts(k, kept_chance(none, none)).any())

    def counts(self, k: Tensor, chance: Tensor) -> Tensor:
        """(A,) how many proposals each row verifies this call, at most k (A,), given its chance (A,)."""
        rows = k.shape[0]
        if not self.calls:
            return torch.zeros_like(k)  # the first call: a plain step, timed
        fit = self.fit(rows)
        if fit is None:  # spreading the proposing calls' positions: A / 2, then A proposals, round the rows
            extra = max(1, rows // 2) * (1 + len(self.proposing) % 2)
            spread = extra // rows + (torch.arange(rows, device=k.device) < extra % rows).long()
            return torch.minimum(spread, k)
        a, b, c = fit
        width = int(k.max()) if rows else 0
        j = torch.arange(1, width + 1, device=k.device)
        odds = torch.where(j[None, :] <= k[:, None], chance[:, None] ** j[None, :], -1.0)  # (A, K), -1: none
        ranked, order = odds.flatten().sort(descending=True)
        widest = max(r for _, r, _ in self.calls) + max(1, int(rows * self.WIDEN))  # the most the fit answers for
        ranked = ranked[ranked > 0][: max(0, widest - rows)]
        n = torch.arange(ranked.numel() + 1, dtype=torch.float64, device=k.device)
        kept = torch.cat([ranked.new_zeros(1), ranked.cumsum(0)]).double()  # (n + 1,) tokens expected beyond A
        saved = kept * (a + b * rows) / rows - b * n - c * (n > 0).double()  # seconds, against a plain step
        best = int(saved.argmax())  # the first of equals: fewest positions
        taken = torch.zeros(odds.numel(), dtype=torch.long, device=k.device)
        taken[order[:best]] = 1
        return taken.view(odds.shape).sum(1)


def cache_room(limit: int) -> int:
    """Positions a speculative search's cache (the model's, or a draft model's) starts with, for rows of up to
    `limit` new tokens: twice a plain search's `limit + 1`, since a row keeps holes where it rejected what another
    row kept (`DecoderCache.reject_` drops the positions no row kept, and squeezes the holes out where they come
    to a quarter of the generated positions), so that the buffers are seldom copied into larger ones mid-batch."""
    return 2 * (limit + 1)


PACINGS: WeakKeyDictionary[Model, dict[tuple[str, int], Pacing]] = WeakKeyDictionary()


def pacing_for(model: Model, setting: str, rows: int) -> Pacing:
    """The process's `Pacing` of `model` under a decoding setting (its label: the draft, its k and schedule)
    for batches of `rows` rows: the costs its earlier batches measured, a new one for a setting or batch size not
    decoded yet. Per batch size, since a call's cost is not one line from one row to hundreds (flat while the
    products read weights, steep once they compute); a model freed, its costs go with it."""
    return PACINGS.setdefault(model, {}).setdefault((setting, rows), Pacing())


class Chooser:
    """The model's (or the draft's) choice at a position, as plain decoding makes it at that step: the
    processors on the row's prefix, forced EOS at the row's limit, and the step's keyed noise when sampling."""

    def __init__(self, processors: Sequence[LogitsProcessor], ids: HasSpecialIds, max_new: Tensor,
                 keys: Tensor | None, seed: int, force_eos: ForceEOS | None) -> None:
        self.processors, self.eos, self.max_new = list(processors), ids.eos_id, max_new
        self.keys, self.seed, self.force_eos = keys, seed, force_eos

    def bind(self, active: Tensor, prefixes: Tensor, generated: Tensor) -> None:
        """A round's rows: their example indices (A,), their prefixes (A, 1 + limit + K): the decoder start, the
        tokens so far and this round's proposals right after them, and how many they generated (A,)."""
        self.active, self.prefixes, self.generated = active, prefixes, generated
        lengths = generated.unique().tolist() if self.processors else []
        self.groups = [(g, (generated == g).nonzero().squeeze(1)) for g in lengths]

    def __call__(self, logits: Tensor, j: int) -> Tensor:
        """(A, V) fp32 logits of every row's position j (after j proposals) -> the (A,) chosen tokens."""
        scores = logits
        if self.processors:
            scores = torch.empty_like(logits)
            for g, rows in self.groups:
                scores[rows] = apply(for_examples(self.processors, self.active[rows]),
                                     self.prefixes[rows, : 1 + g + j], logits[rows])
        step = self.generated + j  # (A,) each row's step
        at_limit = step + 1 >= self.max_new[self.active]
        keys = None if self.keys is None else self.keys[self.active]
        return choose_tokens(logits, scores, at_limit, self.eos, self.force_eos, keys, self.seed, step)[1]


class Draft(Protocol):
    """Proposes tokens for the rows of a speculative search and follows what the model kept."""

    def propose(self, counts: Tensor, choose: Chooser, prefixes: Tensor, generated: Tensor) -> Tensor:
        """Up to counts[r] proposals for row r, written into `prefixes` after its `generated` tokens (and
        chosen with `choose` where the draft is a model); returns how many row r proposed (A,)."""

    def follow(self, kept: Tensor, tokens: Tensor) -> None:
        """After the model's call: each row kept `kept` (A,) proposals and wrote the first kept + 1 of `tokens`
        (A, K + 1) (the kept proposals, then the model's own next token)."""

    def keep_rows(self, index: Tensor) -> None:
        """Only rows `index` stay (the others finished)."""


def after(generated: Tensor, width: int) -> Tensor:
    """(A, width) the columns of a row's prefix (its decoder start, then its tokens) after its generated tokens."""
    return 1 + generated[:, None] + torch.arange(width, device=generated.device)[None, :]


def scatter_after(prefixes: Tensor, generated: Tensor, proposals: Tensor, counts: Tensor) -> None:
    """In place: row r's first counts[r] proposals (A, K) into `prefixes` right after its decoder start and its
    generated[r] tokens."""
    columns = after(generated, proposals.shape[1])  # (A, K)
    used = torch.arange(proposals.shape[1], device=proposals.device)[None, :] < counts[:, None]
    rows = torch.arange(prefixes.shape[0], device=prefixes.device)[:, None].expand_as(columns)
    prefixes[rows[used], columns[used]] = proposals[used]


def draft_counts(k: Tensor, generated: Tensor, max_new: Tensor) -> Tensor:
    """(A,) how many proposals each row may take: its k, and room for the model's own token within its limit."""
    return torch.minimum(k, (max_new - generated - 1).clamp(min=0))


@dataclass
class Rows:
    """The rows of a speculative search still decoding, and everything they generated so far (by example)."""

    active: Tensor  # (A,) example index of each row
    last: Tensor  # (A,) each row's last decoder input: the model reads it first in the next call
    k: Tensor  # (A,) each row's proposal budget
    tokens: Tensor  # (n, limit) every example's tokens
    logprobs: Tensor  # (n, limit)
    lengths: Tensor  # (n,)
    proposed: Tensor  # (A,) proposals each row had verified
    accepted: Tensor  # (A,) of them, kept

    def keep(self, index: Tensor) -> None:
        self.active, self.last, self.k = self.active[index], self.last[index], self.k[index]
        self.proposed, self.accepted = self.proposed[index], self.accepted[index]

    @property
    def chance(self) -> Tensor:
        """(A,) each row's chance of keeping a proposal (`kept_chance`)."""
        return kept_chance(self.accepted, self.proposed)


def kept_chance(accepted: Tensor, proposed: Tensor) -> Tensor:
    """(A,) a row's chance of keeping its next proposal: its share kept so far, one kept and one rejected counted
    in (a new row: 1/2)."""
    return (accepted + 1.0) / (proposed + 2.0)


def verify(logits: Tensor, proposals: Tensor, counts: Tensor, choose: Chooser,
           ids: HasSpecialIds) -> tuple[Tensor, Tensor]:
    """The model's choices (A, K + 1) at the positions of its call (logits (A, K + 1, V)) up to each row's last
    kept one, and how many proposals each row keeps (A,): the leading ones equal to its choices, up to an EOS
    (`draft_counts` already keeps them within the row's limit)."""
    a, width = logits.shape[0], logits.shape[1]
    chosen = torch.zeros(a, width, dtype=torch.long, device=logits.device)
    kept = torch.zeros(a, dtype=torch.long, device=logits.device)
    going = torch.ones(a, dtype=torch.bool, device=logits.device)  # still matching its proposals
    for j in range(width):
        chosen[:, j] = choose(logits[:, j].float(), j)
        if j == width - 1:
            break
        going &= (j < counts) & (proposals[:, j] == chosen[:, j]) & ~ends(chosen[:, j], ids)  # counts keep the limit
        kept += going.long()
        if not bool(going.any()):
            break
    return chosen, kept


def speculative_search(
    model: Model, cache: DecoderCache, draft: Draft, *, ids: HasSpecialIds, max_new: Tensor,
    processors: Sequence[LogitsProcessor], keys: Tensor | None, seed: int, force_eos: ForceEOS | None,
    start: Tensor | None, draft_tokens: int, adaptive: bool, stats: SpeculativeStats | None = None,
    pacing: Pacing | None = None,
) -> GenerateOutput:
    """One hypothesis per row, as `search.sample_or_greedy` with the same arguments returns it, in fewer decoder
    calls (module docstring). max_new: (N,) per-row limits; keys: sampling keys or None (greedy); pacing: which
    proposals pay, measured on the batch's calls (None: every row proposes its k at every call)."""
    n, limit, device = max_new.shape[0], int(max_new.max()), max_new.device
    none = torch.zeros(n, dtype=torch.long, device=device)
    rows = Rows(torch.arange(n, device=device), start_tokens(start, ids.bos_id, (n,), device),
                torch.full((n,), draft_tokens, dtype=torch.long, device=device),
                torch.full((n, limit), ids.pad_id, dtype=torch.long, device=device),
                torch.zeros((n, limit), device=device), none.clone(), none.clone(), none.clone())
    first = rows.last.clone()  # (n,) each example's decoder start
    choose, stats = Chooser(processors, ids, max_new, keys, seed, force_eos), stats or SpeculativeStats()
    while rows.active.numel():
        called = pacing.clock() if pacing is not None else 0.0
        active = rows.active
        generated = rows.lengths[active]
        counts = draft_counts(rows.k, generated, max_new[active])
        if pacing is not None:
            counts = pacing.counts(counts, rows.chance)
        width = int(counts.max())
        prefixes = torch.full((active.shape[0], 1 + limit + width), ids.pad_id, dtype=torch.long, device=device)
        prefixes[:, 0], prefixes[:, 1 : 1 + limit] = first[active], rows.tokens[active]
        choose.bind(active, prefixes, generated)
        began = time.perf_counter()
        counts = draft.propose(counts, choose, prefixes, generated)
        stats.draft_seconds += time.perf_counter() - began
        proposals = prefixes.gather(1, after(generated, width))  # (A, K)
        logits, chosen, kept, cache = model_call(model, cache, rows.last, proposals, counts, choose, ids)
        record(rows, logits, chosen, kept, generated)
        draft.follow(kept, chosen)
        proposed, accepted = int(counts.sum()), int(kept.sum())
        stats.calls += active.shape[0]
        stats.proposed += proposed
        stats.accepted += accepted
        stats.tokens += accepted + active.shape[0]
        rows.proposed, rows.accepted = rows.proposed + counts, rows.accepted + kept
        if adaptive:  # the rows that proposed
            grown = torch.where(kept == counts, (rows.k + 2).clamp(max=2 * draft_tokens), (rows.k - 1).clamp(min=1))
            rows.k = torch.where(counts > 0, grown, rows.k)
        last = chosen.gather(1, kept[:, None]).squeeze(1)
        rows.last = last
        if pacing is not None:
            pacing.observe(active.shape[0], active.shape[0] + proposed, pacing.clock() - called)
        running = ~ends(last, ids) & (rows.lengths[active] < max_new[active])
        if not bool(running.all()):
            keep = in_place_order(running)
            rows.keep(keep)
            cache.compact_(keep)
            draft.keep_rows(keep)
    return GenerateOutput(rows.tokens[:, None], rows.logprobs[:, None].sum(-1), rows.logprobs[:, None],
                          rows.lengths[:, None])


def model_call(model: Model, cache: DecoderCache, last: Tensor, proposals: Tensor, counts: Tensor, choose: Chooser,
               ids: HasSpecialIds) -> tuple[Tensor, Tensor, Tensor, DecoderCache]:
    """The model reads each row's last token (A,) and its first counts[r] proposals (A, K): its logits, its
    choices and the proposals each row keeps (`verify`), the cache holding the kept positions only. A call that
    verifies no proposal on a cache without holes is a plain step: no validity record, the plain decoder path."""
    width, device = proposals.shape[1], proposals.device
    tracked = width > 0 or cache.valid is not None  # the cache keeps a validity record (holes may follow)
    if tracked:
        cache.admit_(torch.cat([torch.ones_like(counts[:, None], dtype=torch.bool),
                                torch.arange(width, device=device)[None, :] < counts[:, None]], dim=1))
    logits, cache = model.decode(torch.cat([last[:, None], proposals], dim=1), None, None, cache)
    chosen, kept = verify(logits, proposals, counts, choose, ids)
    if tracked:
        cache.reject_(torch.arange(width + 1, device=device)[None, :] <= kept[:, None])
    return logits, chosen, kept, cache


def record(rows: Rows, logits: Tensor, chosen: Tensor, kept: Tensor, generated: Tensor) -> None:
    """Write each row's new tokens (its kept proposals, then the model's own token) and their log-probs."""
    width = chosen.shape[1]
    written = torch.arange(width, device=chosen.device)[None, :] <= kept[:, None]  # (A, K + 1)
    tokens = chosen[written]  # (W,) the log-softmax only over the W written positions
    logprobs = F.log_softmax(logits[written].float(), dim=-1).gather(1, tokens[:, None]).squeeze(1)
    examples = rows.active[:, None].expand_as(chosen)[written]
    columns = (generated[:, None] + torch.arange(width, device=chosen.device)[None, :])[written]
    rows.tokens[examples, columns] = tokens
    rows.logprobs[examples, columns] = logprobs
    rows.lengths[rows.active] = generated + kept + 1


class LookupDraft:
    """Prompt lookup (Hugging Face's `PromptLookupCandidateGenerator`, per row): each row's history is its
    source's real tokens, its decoder start and its output so far; its proposals are the tokens after the
    earliest earlier occurrence of its last n tokens, n from `ngram` down to 1, cut before the first EOS."""

    def __init__(self, src_ids: Tensor, src_pad_mask: Tensor, start: Tensor, limit: int, ngram: int,
                 pad_id: int, end_ids: tuple[int, ...]) -> None:
        lengths = (~src_pad_mask).sum(1)  # (N,) sources are right-padded
        self.history = torch.full((src_ids.shape[0], src_ids.shape[1] + 1 + limit), pad_id, dtype=torch.long,
                                  device=src_ids.device)
        self.history[:, : src_ids.shape[1]] = torch.where(src_pad_mask, pad_id, src_ids)
        self.lengths = lengths + 1
        self.history[torch.arange(src_ids.shape[0], device=src_ids.device), lengths] = start
        self.ngram, self.ends = ngram, end_ids

    def propose(self, counts: Tensor, choose: Chooser, prefixes: Tensor, generated: Tensor) -> Tensor:
        width = int(counts.max())
        if width == 0:
            return counts
        proposals, found = lookup(self.history, self.lengths, width, self.ngram, self.ends)
        found = torch.minimum(found, counts)
        scatter_after(prefixes, generated, proposals, found)
        return found

    def follow(self, kept: Tensor, tokens: Tensor) -> None:
        scatter_after(self.history, self.lengths - 1, tokens, kept + 1)
        self.lengths = self.lengths + kept + 1

    def keep_rows(self, index: Tensor) -> None:
        self.history, self.lengths = self.history[index], self.lengths[index]


def lookup(history: Tensor, lengths: Tensor, width: int, ngram: int, end_ids: tuple[int, ...]
           ) -> tuple[Tensor, Tensor]:
    """Prompt lookup on every row at once: (A, width) proposals and how many of them each row has (A,).

    history (A, H) left-aligned, lengths (A,). For n from `ngram` down to 1, a row that has no match yet takes
    the first window equal to its last n tokens that is followed by a token of its history; the tokens after
    it, up to `width` and the history's end, are its proposals, cut before the first end token (Hugging Face's
    rule: a match whose proposals the cut empties still ends the search)."""
    a, h = history.shape
    device = history.device
    proposals = torch.zeros(a, width, dtype=torch.long, device=device)
    counts = torch.zeros(a, dtype=torch.long, device=device)
    found = torch.zeros(a, dtype=torch.bool, device=device)
    offsets = torch.arange(width, device=device)[None, :]
    for size in range(min(ngram, h), 0, -1):
        windows = history.unfold(1, size, 1)  # (A, W, size)
        tail = history.gather(1, (lengths[:, None] - size + torch.arange(size, device=device)).clamp(min=0))
        starts = torch.arange(windows.shape[1], device=device)[None, :]
        match = (windows == tail[:, None, :]).all(-1) & (starts + size < lengths[:, None])  # (A, W)
        match &= (~found & (lengths >= size))[:, None]
        hit = match.any(1)
        if not bool(hit.any()):
            continue
        begin = match.int().argmax(1) + size  # (A,) the first token after the earliest match
        taken = begin[:, None] + offsets  # (A, width)
        tokens = history.gather(1, taken.clamp(max=h - 1))
        usable = (taken < lengths[:, None]) & (among(tokens, end_ids).long().cumsum(1) == 0)
        proposals = torch.where(hit[:, None], tokens, proposals)
        counts = torch.where(hit, usable.long().cumprod(1).sum(1), counts)
        found |= hit
    return proposals, counts


class ModelDraft:
    """A draft model (any seqlab model with the model's target vocabulary and special ids) decoding its own
    cache: each call reads the tokens it has not read yet (the model's last token, and its last kept
    proposal where it kept them all), then proposes one token per step, chosen as the model chooses."""

    def __init__(self, draft: Model, src_ids: Tensor, src_pad_mask: Tensor, start: Tensor, rows: int,
                 capacity: int) -> None:
        self.model = draft
        memory = draft.encode(src_ids, src_pad_mask)
        self.cache = draft.start_cache(memory, src_pad_mask, group=rows, capacity=capacity,
                                       src_ids=src_ids).ungroup()
        n = start.shape[0]
        self.unread = torch.stack([torch.zeros_like(start), start], dim=1)  # (N, 2): a filler, the start token
        self.unread_valid = torch.tensor([[False, True]], device=start.device).expand(n, 2).clone()
        self.width, self.last = 0, start

    def propose(self, counts: Tensor, choose: Chooser, prefixes: Tensor, generated: Tensor) -> Tensor:
        width = int(counts.max())
        self.width = width
        inputs, valid = self.unread, self.unread_valid
        for j in range(width):
            self.cache.admit_(valid)
            logits, self.cache = self.model.decode(inputs, None, None, self.cache)
            token = choose(logits[:, -1].float(), j)  # (A,)
            prefixes[torch.arange(token.shape[0], device=token.device), 1 + generated + j] = token  # `after`, column j
            inputs, valid = token[:, None], torch.ones_like(valid[:, :1])
        self.last = inputs[:, 0]
        return counts

    def follow(self, kept: Tensor, tokens: Tensor) -> None:
        """The draft read its unread tokens (a filler or its last proposal, the model's tokens since it last read)
        and proposals 0..K-2; of those, the proposals beyond the kept ones become holes. A row that kept all K
        has not read its last proposal: it reads it next, before the model's token."""
        k = self.width
        if k == 0:  # a plain step (no row proposed): the draft reads the model's token with what it has not read
            self.unread = torch.cat([self.unread, tokens[:, :1]], dim=1)
            self.unread_valid = torch.cat([self.unread_valid, torch.ones_like(self.unread_valid[:, :1])], dim=1)
            return
        read = torch.arange(k - 1, device=kept.device)[None, :] < kept[:, None]  # proposals 0..K-2 kept
        self.cache.reject_(torch.cat([read.new_ones(read.shape[0], self.unread.shape[1]), read], dim=1))
        bonus = tokens.gather(1, kept[:, None]).squeeze(1)
        whole = kept == k
        self.unread = torch.stack([torch.where(whole, self.last, 0), bonus], dim=1)
        self.unread_valid = torch.stack([whole, torch.ones_like(whole)], dim=1)

    def keep_rows(self, index: Tensor) -> None:
        self.cache.compact_(index)
        self.unread, self.unread_valid = self.unread[index], self.unread_valid[index]


def check_draft(draft: ModelConfig, model: ModelConfig, setting: str) -> None:
    """Fail, naming the setting, where the draft cannot propose the model's tokens: another target vocabulary,
    other special ids, another first decoder input (a causal LM's prompt against a decoder start token)."""
    differences = [f"{key} {getattr(draft, key)} against {getattr(model, key)}"
                   for key in ("target_vocab_size", "pad_id", "bos_id", "eos_id", "extra_eos_ids", "start")
                   if getattr(draft, key) != getattr(model, key)]
    if differences:
        raise ConfigError(f"decoding.draft={setting}: the draft's model differs from the decoded one in "
                          f"{', '.join(differences)}; a draft must share the target vocabulary, tokenizer and "
                          "special ids (train it on the same data, or use decoding.draft=lookup)")
