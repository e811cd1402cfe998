"""generate(): encode, pick the search, return sequences, scores and token log-probs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from seqlab.bf16_gemm import bf16_autocast
from seqlab.config import ConfigError, check_choice
from seqlab.constants import SpecialIds
from seqlab.data.sequences import pad_right
from seqlab.decoding.beam import BeamStrategy, PlainBeams, beam_loop
from seqlab.decoding.config import DecodingConfig
from seqlab.decoding.constrained import ConstrainedBeams
from seqlab.decoding.constraints import check_constraints
from seqlab.decoding.contrastive import contrastive_search
from seqlab.decoding.coverage import Coverage
from seqlab.decoding.diverse import DiverseBeams
from seqlab.decoding.methods import method_of
from seqlab.decoding.processors import ForcedPrefix
from seqlab.decoding.prompts import check_layout, in_prompt, prompt_context
from seqlab.decoding.registry import build_processors
from seqlab.decoding.sampling import mix32, source_keys
from seqlab.decoding.search import GenerateOutput, LengthPenalty, StepFn, model_step, sample_or_greedy
from seqlab.decoding.speculative import (
    LookupDraft,
    ModelDraft,
    Pacing,
    SpeculativeStats,
    cache_room,
    check_draft,
    pacing_for,
    speculative_search,
)
from seqlab.model import DecoderCache, DecodingModel, ModelConfig

DecodePrecision = Literal["fp32", "bf16", "int8"]  # int8: an int8 engine (engines.choice), not autocast


def check_precision(precision: str, owner: str = "eval") -> None:
    """Fail unless `precision` is a decoding precision; `owner` names the config it came from."""
    check_choice(owner, "precision", precision, DecodePrecision)


def precision_context(precision: str, device: torch.device | str) -> AbstractContextManager:
    """Where decoding runs: fp32, or the model under bf16 autocast (scores, log-probs and the search stay fp32).

    bf16 is faster where bf16 matrix products are (docs/performance.md: 2-3.8x Hugging Face in fp32 on a CPU with
    AVX512-BF16), but rounding changes ties and near-ties: 20-25% of the outputs differed from fp32 there.
    """
    check_precision(precision)
    if precision == "int8":
        raise ConfigError("precision=int8 decodes on an int8 copy of the model (engines.choice.make_engine), "
                          "not under autocast")
    return bf16_autocast(torch.device(device).type, precision == "bf16")


def max_new_tokens(cfg: DecodingConfig, src_pad_mask: Tensor, max_positions: int) -> Tensor:
    """(B,) generation limit per example: max_length, or floor(a * src_len + b); < max_positions."""
    src_len = (~src_pad_mask).sum(dim=1)
    if cfg.max_length is not None:
        limit = torch.full_like(src_len, cfg.max_length)
    else:
        limit = torch.floor(cfg.max_len_a * src_len.double() + cfg.max_len_b).long()
    return limit.clamp(min=max(1, cfg.min_length), max=max_positions - 1)


def search_limits(cfg: DecodingConfig, model_cfg: ModelConfig, src_pad_mask: Tensor) -> Tensor:
    """(B,) each source's limit on new tokens (EOS included), as the search counts it: `max_new_tokens`, and for
    a one-stack model the room its positions leave after the source (or prompt). src_pad_mask: (B, S) of the
    whole source or prompt; a causal LM continuing its prompt (model.start=prompt) feeds the prompt's last token
    as its first decoder input, so that token's position is the first step's, not the prompt's. Every engine
    and check that needs a limit reads it here."""
    layout = model_cfg.layout
    read = layout.read_before_target(src_pad_mask)  # an empty prompt is refused by layout.split
    return layout.room(max_new_tokens(cfg, read, model_cfg.max_positions), read, model_cfg.max_positions)


def length_penalty(cfg: DecodingConfig) -> LengthPenalty:
    """How beam search normalizes finished scores for this setting."""
    return LengthPenalty(cfg.length_penalty, cfg.length_rule)


def forced_prefix(prefixes: Sequence[Sequence[int]], limits: Tensor, rows: int, pad_id: int) -> ForcedPrefix:
    """The sources' target prefixes as a processor, one row per decoder row where rows are their own examples
    (samples; beam search binds a source's beams to it). Fails, naming the source, where a prefix leaves no
    room within the source's length limit (it must end before it, EOS included)."""
    for i, (p, limit) in enumerate(zip(prefixes, limits.tolist(), strict=True)):
        if len(p) >= limit:
            raise ConfigError(f"target prefix of source {i} has {len(p)} tokens, but its length limit is {limit} "
                              "(EOS included): shorten the prefix or raise decoding.max_length / max_len_b")
    tokens, _ = pad_right([list(p) for p in prefixes], pad_id)
    if tokens.shape[1] == 0:
        tokens = torch.full((len(prefixes), 1), pad_id)
    return ForcedPrefix(tokens.to(limits.device).repeat_interleave(rows, 0), pad_id)


def first_hypotheses(out: GenerateOutput, n: int) -> GenerateOutput:
    """The first n hypotheses of each source."""
    return GenerateOutput(out.sequences[:, :n], out.scores[:, :n], out.token_logprobs[:, :n], out.lengths[:, :n])


@torch.no_grad()
def generate(model: DecodingModel, src_ids: Tensor, src_pad_mask: Tensor, cfg: DecodingConfig,
             sample_keys: Tensor | None = None,
             target_prefix: Sequence[Sequence[int]] | None = None,
             constraints: Sequence[Sequence[Sequence[int]]] | None = None,
             step: Callable[[DecodingModel], StepFn] | None = None,
             on_step: Callable[..., None] | None = None, draft_model: DecodingModel | None = None,
             stats: SpeculativeStats | None = None) -> GenerateOutput:
    """Decode a batch. src_ids (B, S) long; src_pad_mask (B, S) bool, True at padding.

    sample_keys: optional (B,) ints identifying each source for sampling; by default
    a hash of the source tokens, so a source's samples are the same in any batch.
    target_prefix: optional token ids each source's outputs start with (EOS excluded; empty: none), generated
    first and scored like the rest (processors.ForcedPrefix).
    constraints: with `cfg.constraints`, each source's lexical constraints (token id sequences, none: []);
    None: no source has any.
    step: makes each search's one-token decoder step from the model in place of `model_step` (engines.graphs:
    `GraphedStep`, the step replayed as a CUDA graph). Contrastive search, which reads the model's hidden states,
    decodes eagerly.
    on_step: a hook that sees every step of greedy search, sampling and plain beam search (the searches'
    `on_step`; inference.inspection draws its traces with it).
    draft_model: with `cfg.draft=ckpt:PATH`, that checkpoint's model (seqlab.inference.drafts.load_draft).
    stats: a `SpeculativeStats` that speculative decoding adds its counts to.
    """
    model_cfg = model.cfg
    check_request(cfg, step is not None, constraints, target_prefix, on_step)
    check_layout(cfg, model_cfg)
    limits = search_limits(cfg, model_cfg, src_pad_mask)
    # a causal LM continues its prompt's last token (start), the others their decoder start token (None)
    src_ids, src_pad_mask, start = model_cfg.layout.split(src_ids, src_pad_mask, model_cfg.pad_id)
    method = method_of(cfg)
    rows = 1 if method.beams else cfg.rows_per_source  # a beam search binds a source's beams to it
    prefix = None if target_prefix is None else forced_prefix(target_prefix, limits, rows, model_cfg.pad_id)
    processors = build_processors(cfg, model_cfg, prefix)
    if start is not None:  # a causal LM's processors read its prompt, as Hugging Face's do (decoding.prompts)
        processors = in_prompt(processors, prompt_context(src_ids, src_pad_mask).repeat_interleave(rows, 0))
    was_training = model.training
    model.eval()
    try:
        memory = model.encode(src_ids, src_pad_mask)
        plain_beam = method.beams and cfg.num_beam_groups == 1  # makes its beams after the first step
        room = int(limits.max()) + 1 if cfg.draft is None else cache_room(int(limits.max()))
        cache = model.start_cache(memory, src_pad_mask, group=1 if plain_beam else cfg.rows_per_source,
                                  capacity=room, src_ids=src_ids)
        search = Search(model, (step or model_step)(model), cache, cfg, src_ids, src_pad_mask, limits, processors,
                        start)
        if cfg.draft is not None:
            search.speculation = Speculation(draft_model, stats)
        result = search.run(sample_keys, constraints, on_step)
    finally:
        model.train(was_training)
    width = max(1, int(result.lengths.max()))
    return GenerateOutput(result.sequences[..., :width], result.scores, result.token_logprobs[..., :width],
                          result.lengths)


def check_request(cfg: DecodingConfig, own_step: bool, constraints: Sequence | None, target_prefix: Sequence | None,
                  on_step: Callable[..., None] | None) -> None:
    """Fail, naming what to change, where generate's arguments and `cfg` do not combine."""
    if constraints is not None and cfg.constraints is None:
        raise ConfigError("lexical constraints were given but decoding.constraints is null: set it to ordered "
                          "(in the order given) or unordered")
    if own_step and cfg.coverage_penalty is not None:
        raise ConfigError("a coverage penalty records the attention at every step, which a given step (a captured "
                          "one) does not: decode it with the model's own step (engine=seqlab)")
    if cfg.constraints is not None and target_prefix is not None:
        raise ConfigError("decoding.constraints and a target prefix do not combine: give one")
    if cfg.draft is not None and (own_step or on_step is not None):
        raise ConfigError(f"decoding.draft={cfg.draft} verifies several positions per decoder call, which "
                          f"{'a given one-token step' if own_step else 'a step trace'} cannot follow: decode it "
                          "with decoding.draft=null" + (" or engine=seqlab" if own_step else ""))
    if on_step is not None and (cfg.constraints is not None or cfg.num_beam_groups > 1 or not method_of(cfg).traced):
        raise ConfigError("step traces follow greedy search, sampling and plain beam search, not "
                          f"{cfg.label}: decode it without a step hook")


@dataclass
class Search:
    """One batch's search, set up by `generate`: the model, its step and cache, the limits (B,), the processors
    and each source's first decoder input (a causal LM's last prompt token; None: the decoder start)."""

    model: DecodingModel
    step: StepFn
    cache: DecoderCache
    cfg: DecodingConfig
    src_ids: Tensor  # (B, S) (a causal LM's prompt without its last token)
    src_pad_mask: Tensor  # (B, S)
    limits: Tensor  # (B,)
    processors: list
    start: Tensor | None
    speculation: Speculation | None = None  # decoding.draft's draft model (or None: loaded) and stats

    @property
    def ids(self) -> SpecialIds:
        c = self.model.cfg
        return SpecialIds(c.pad_id, c.bos_id, c.eos_id, c.extra_eos_ids, c.unemitted)

    def run(self, sample_keys: Tensor | None, constraints: Sequence[Sequence[Sequence[int]]] | None,
            on_step: Callable[..., None] | None) -> GenerateOutput:
        """The search `cfg` names, its hypotheses per source (B, n, ...)."""
        cfg = self.cfg
        if cfg.constraints is not None:
            return first_hypotheses(self.constrained(constraints), cfg.hypotheses_per_source)
        return method_of(cfg).run(self, sample_keys, on_step)

    def contrastive(self) -> GenerateOutput:
        """Contrastive search (Su et al. 2022), one hypothesis per source."""
        cfg = self.cfg
        return contrastive_search(self.model, self.cache, ids=self.ids, max_new=self.limits,
                                  processors=self.processors, top_k=cfg.top_k, alpha=cfg.penalty_alpha,
                                  force_eos=cfg.force_eos or None, start=self.start)

    def constrained(self, constraints: Sequence[Sequence[Sequence[int]]] | None) -> GenerateOutput:
        """Lexically constrained beam search, each source's constraints checked against its limit first."""
        if self.ids.extra_eos_ids:
            raise ConfigError(f"decoding.constraints: fairseq's constrained beam search ends at one token, and this "
                              f"model ends at any of {list(self.ids.end_ids)} (model.extra_eos_ids); decode it "
                              "without constraints")
        given = constraints if constraints is not None else [[] for _ in range(self.src_ids.shape[0])]
        for i, (c, limit) in enumerate(zip(given, self.limits.tolist(), strict=True)):
            check_constraints(c, f"source {i} of the batch", limit)
        return self.loop(ConstrainedBeams(self.ids, self.limits, self.cfg.num_beams, length_penalty(self.cfg), given,
                                          self.cfg.constraints, self.start))

    def beams(self, on_step: Callable[..., None] | None) -> GenerateOutput:
        """Plain beam search (with cfg's coverage penalty where set), or diverse beam search in groups: each
        source's first hypotheses."""
        return first_hypotheses(self.beam_search(on_step), self.cfg.hypotheses_per_source)

    def beam_search(self, on_step: Callable[..., None] | None) -> GenerateOutput:
        cfg, force_eos = self.cfg, self.cfg.force_eos or None
        if cfg.num_beam_groups > 1:
            return self.loop(DiverseBeams(self.ids, self.limits, cfg.num_beams, cfg.num_beam_groups,
                                          cfg.diversity_penalty, length_penalty(cfg), cfg.early_stopping, force_eos,
                                          self.start))
        coverage = (None if cfg.coverage_penalty is None else
                    Coverage(self.src_pad_mask, cfg.num_beams, cfg.coverage_penalty, cfg.coverage_beta))
        strategy = PlainBeams(self.ids, self.limits, cfg.num_beams, length_penalty(cfg), cfg.early_stopping,
                              force_eos, self.start, on_step, coverage)
        if coverage is None:
            return self.loop(strategy)
        with coverage.recording(self.model):  # the penalty reads the last decoder layer's cross-attention
            return self.loop(strategy)

    def loop(self, strategy: BeamStrategy) -> GenerateOutput:
        """`strategy` run by the one beam loop over this batch."""
        return beam_loop(strategy, self.step, self.cache, self.processors, int(self.limits.max()),
                         self.limits.shape[0], self.limits.device)

    def rows(self, sample_keys: Tensor | None, on_step: Callable[..., None] | None) -> GenerateOutput:
        """Greedy search or sampling: each source's rows (samples) decoded as examples of their own."""
        cfg, b, rows = self.cfg, self.src_ids.shape[0], self.cfg.rows_per_source
        cache = self.cache.ungroup()  # samples finish one by one: each row gets its own cross keys/values
        keys = None
        if method_of(cfg).samples:
            base = source_keys(self.src_ids, self.src_pad_mask) if sample_keys is None else sample_keys.long()
            keys = mix32(base.repeat_interleave(rows) * 0x01000193
                         + torch.arange(rows, device=base.device).repeat(len(base)))
        start = None if self.start is None else self.start.repeat_interleave(rows)
        limits = self.limits.repeat_interleave(rows)  # (B * rows,) each row's own
        speculating = self.speculation is not None
        drafter, pacing = (self.draft_model(), self.pacing(limits.shape[0])) if speculating else (None, None)
        # a batch whose first call would verify no proposal is plain greedy search or sampling itself
        if speculating and (pacing is None or pacing.pays(limits, cfg.draft_tokens)):
            result = self.speculative(cache, keys, start, limits, drafter, pacing)
        else:
            result = sample_or_greedy(self.step, cache, ids=self.ids, max_new=limits, processors=self.processors,
                                      keys=keys, seed=cfg.seed, force_eos=cfg.force_eos or None, on_step=on_step,
                                      start=start)
            if speculating and self.speculation.stats is not None:
                self.speculation.stats.add_plain(int(result.lengths.sum()))
        return GenerateOutput(result.sequences.view(b, rows, -1), result.scores.view(b, rows),
                              result.token_logprobs.view(b, rows, -1), result.lengths.view(b, rows))

    def pacing(self, rows: int) -> Pacing | None:
        """The measured costs that choose the proposals a call of `rows` rows verifies (`draft_positions=paying`,
        `Pacing.pays`), else None."""
        if self.cfg.draft_positions != "paying":
            return None
        return pacing_for(self.model, self.cfg.label, rows)

    def draft_model(self) -> DecodingModel | None:
        """The draft model of `cfg.draft=ckpt:PATH`, checked against the decoded one (None: prompt lookup)."""
        if self.cfg.draft == "lookup":
            return None
        model = self.speculation.model
        if model is None:
            raise ConfigError(f"decoding.draft={self.cfg.draft}: pass the draft's model to generate (draft_model=; "
                              "seqlab.inference.drafts.load_draft loads a checkpoint's)")
        check_draft(model.cfg, self.model.cfg, self.cfg.draft)
        return model

    def speculative(self, cache: DecoderCache, keys: Tensor | None, start: Tensor | None, limits: Tensor,
                    model: DecodingModel | None, pacing: Pacing | None) -> GenerateOutput:
        """Greedy search or sampling with `cfg.draft`'s proposals (decoding.speculative): the same rows, each of
        at most `limits` (B * rows,) tokens; `model`: the draft model (None: prompt lookup); `pacing` chooses the
        proposals each call verifies (None: all)."""
        cfg, rows = self.cfg, self.cfg.rows_per_source
        first = start if start is not None else torch.full_like(limits, self.ids.bos_id)
        src_ids, src_pad_mask = self.src_ids.repeat_interleave(rows, 0), self.src_pad_mask.repeat_interleave(rows, 0)
        if model is None:
            draft = LookupDraft(src_ids, src_pad_mask, first, int(limits.max()), cfg.lookup_ngram, self.ids.pad_id,
                                self.ids.end_ids)
        else:
            draft = ModelDraft(model, self.src_ids, self.src_pad_mask, first, rows, cache_room(int(limits.max())))
        return speculative_search(self.model, cache, draft, ids=self.ids, max_new=limits, processors=self.processors,
                                  keys=keys, seed=cfg.seed, force_eos=cfg.force_eos or None, start=start,
                                  draft_tokens=cfg.draft_tokens, adaptive=cfg.draft_schedule == "adaptive",
                                  stats=self.speculation.stats, pacing=pacing)


@dataclass(frozen=True)
class Speculation:
    """What speculative decoding takes beyond `cfg`: the draft model of `cfg.draft=ckpt:PATH` (None for prompt
    lookup) and the stats to add to."""

    model: DecodingModel | None
    stats: SpeculativeStats | None


__all__ = ["GenerateOutput", "build_processors", "check_precision", "generate", "precision_context"]
