"""Decode a corpus with one DecodingConfig and compute every metric: the evaluation stage's core.

Sources are tokenized, truncated to what the model can take (counted), sorted by
length and decoded in batches of about `max_tokens` source tokens x rows (beams or
samples), then put back in corpus order.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from seqlab.config import ConfigError
from seqlab.data.corpora import Example
from seqlab.data.sequences import pad_right, truncate
from seqlab.data.tokenizer import Tokenizer
from seqlab.decoding import DecodingConfig, score
from seqlab.decoding.constraints import check_constraints
from seqlab.decoding.engine import DecodeBatch, DecodingEngine, SearchEngine
from seqlab.decoding.generate import search_limits
from seqlab.decoding.labels import run_label
from seqlab.decoding.mbr import MBRChoice, choose, ranked_distinct
from seqlab.decoding.speculative import SpeculativeStats
from seqlab.inference.constraints import met, reference_words
from seqlab.inference.drafts import load_draft
from seqlab.inference.neural import add_neural_metrics
from seqlab.metrics import (
    by_source_length,
    corpus_distinct,
    intervals,
    logprob_summary,
    repetition,
    sacrebleu_scores,
    sample_diversity,
)
from seqlab.metrics import declarations as M
from seqlab.metrics import keys as K
from seqlab.metrics.neural import NeuralSettings
from seqlab.metrics.significance import N_BOOTSTRAP, SACREBLEU_DEFAULT_SEED
from seqlab.metrics.text import check_metrics, segment_means
from seqlab.model import Model, ModelConfig
from seqlab.progress import Progress

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalSettings:
    """What to decode and how big the decoding batches are."""

    split: str = "test"
    limit: int | None = None  # first N examples only (quick looks); None = all
    max_tokens: int = 8000  # source tokens x rows per decoding batch
    score_references: bool = True
    ci_seed: int = SACREBLEU_DEFAULT_SEED  # resampling seed of the confidence intervals
    n_bootstrap: int = N_BOOTSTRAP  # resamples per interval; 0 = no intervals
    precision: str = "fp32"  # decoding: fp32 | bf16 (decoding.generate.precision_context); references stay fp32
    metrics: tuple[str, ...] = field(default_factory=M.default_choices)  # `metrics=[...]` choices (declarations)
    neural: NeuralSettings = field(default_factory=NeuralSettings)  # the neural metrics' models

    def __post_init__(self) -> None:
        object.__setattr__(self, "metrics", check_metrics(self.metrics))


@dataclass
class Record:
    """One source's outputs, as written to hypotheses.jsonl."""

    id: str
    source: str
    reference: str
    hypothesis: str
    nbest: list[dict[str, Any]] = field(default_factory=list)
    token_logprobs: list[float] = field(default_factory=list)
    reference_token_logprobs: list[float] | None = None
    references: list[str] | None = None  # all references, when there are several (the first is `reference`)
    source_tokens: int | None = None  # the source's subword tokens as decoded (what the length buckets count)
    mbr: MBRChoice | None = None  # MBR: every candidate and its expected utility (candidates.jsonl, not here)
    pseudo_references: list[str] | None = None  # MBR with a separate sample of pseudo-references
    constraints: list[str] | None = None  # the words the outputs had to contain (decoding.constraint_words)
    segment_scores: dict[str, float] | None = None  # the neural metrics' scores of the hypothesis

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["mbr"], out["pseudo_references"]
        for key in ("constraints", "segment_scores"):
            if out[key] is None:
                del out[key]
        return out

    def candidates_row(self) -> dict[str, Any] | None:
        """This source's line of candidates.jsonl: enough to recompute the MBR choice."""
        if self.mbr is None:
            return None
        row = {"id": self.id, **self.mbr.to_dict()}
        if self.pseudo_references is not None:
            row["pseudo_references"] = self.pseudo_references
        return row


def length_batches(lengths: Sequence[int], budget: int, rows: int) -> list[list[int]]:
    """Indices sorted by length (longest first) and cut so that n * max_len * rows <= budget."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches, current = [], []
    for i in order:
        longest = lengths[current[0]] if current else lengths[i]
        if current and (len(current) + 1) * longest * rows > budget:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def pad_batch(seqs: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    ids, pad = pad_right(seqs, pad_id)
    return ids.to(device), pad.to(device)


@dataclass
class Decoded:
    """The n-best hypotheses of every source, in input order, and what decoding them took."""

    hypotheses: list[list[tuple[list[int], float, list[float]]]]  # per source: (ids, score, token log-probs)
    src_ids: list[list[int]]  # the sources as decoded (after truncation)
    n_truncated: int
    generated_tokens: int
    seconds: float  # generating the hypotheses (MBR: the candidates)
    mbr: list[MBRChoice] | None = None  # per source, with MBR
    pseudo_references: list[list[str]] | None = None  # per source, when drawn apart from the candidates
    mbr_seconds: float = 0.0  # computing the utilities and choosing
    speculation: SpeculativeStats | None = None  # with decoding.draft: what the draft proposed and the model kept

    @property
    def total_seconds(self) -> float:
        return self.seconds + self.mbr_seconds


def encode_sources(tokenizer: Tokenizer, sources: Sequence[str], model: ModelConfig, cfg: DecodingConfig,
                   names: Sequence[str] | None = None) -> tuple[list[list[int]], int]:
    """The sources' token ids as the model takes them, and how many were truncated: an encoder's source is
    cut to its positions (EOS kept); a one-stack model's prompt is refused (`check_prompts`)."""
    src_ids = tokenizer.encode_source(list(sources))
    max_positions, eos_id = model.max_positions, model.eos_id
    if model.layout.one_sequence:
        check_prompts(src_ids, model, cfg, names)
        return src_ids, 0
    truncated = sum(len(s) > max_positions for s in src_ids)
    if truncated:
        log.warning("%d of %d sources longer than max_positions=%d were truncated", truncated, len(src_ids),
                    max_positions)
    return [truncate(s, max_positions, eos_id) for s in src_ids], truncated


def check_prompts(src_ids: Sequence[Sequence[int]], model: ModelConfig, cfg: DecodingConfig,
                  names: Sequence[str] | None) -> None:
    """A one-stack model's prompts must leave room in its positions: a cut prompt loses its end (a template's
    "TL;DR:" cue, a chat's assistant turn), and a causal LM's `decoding.max_length` new tokens past the last
    position would stop each row early. Refused before anything is decoded, naming the source."""
    room = model.layout.prompt_room(model.max_positions, cfg.max_length)
    for i, ids in enumerate(src_ids):
        if len(ids) > room:
            name = names[i] if names is not None else f"source {i + 1}"
            wanted = (f" and decoding.max_length={cfg.max_length} new tokens" if model.layout.continues_prompt
                      else " and at least one target token")
            raise ConfigError(f"{name}: a prompt of {len(ids)} tokens{wanted} do not fit model.max_positions="
                              f"{model.max_positions}; shorten it (or its template), or lower decoding.max_length")


def source_lengths(src_ids: Sequence[Sequence[int]], eos_id: int) -> list[int]:
    """Each source's length in subword tokens as decoded, EOS not counted: what the length buckets count."""
    return [len(s) - (bool(s) and s[-1] == eos_id) for s in src_ids]


def decode_texts(model: Model, tokenizer: Tokenizer, sources: Sequence[str], cfg: DecodingConfig,
                 max_tokens: int, on_batch: Any = None, precision: str = "fp32",
                 engine: DecodingEngine | None = None,
                 prefixes: Sequence[Sequence[int]] | None = None,
                 constraints: Sequence[Sequence[Sequence[int]]] | None = None,
                 names: Sequence[str] | None = None) -> Decoded:
    """Tokenize, truncate to what the model takes, decode in length-sorted token-budget batches, and
    return the hypotheses in input order. `on_batch(n_sources)` is called after each batch (progress).
    engine: what decodes (decoding.engine; engines.choice.make_engine), None: seqlab's search in `precision`
    (fp32 | bf16: the model under bf16 autocast, `precision_context`); an engine decodes in its own.
    prefixes: each source's forced target prefix (token ids, no EOS; generate's `target_prefix`).
    constraints: each source's lexical constraints (token id sequences; generate's `constraints`), checked
    before any decoding, each source called by its name in `names` (default: `source i`)."""
    device = next(model.parameters()).device
    src_ids, truncated = encode_sources(tokenizer, sources, model.cfg, cfg, names)
    if constraints is not None:
        check_all_constraints(cfg, model.cfg, src_ids, constraints, names)
    decoder = engine or SearchEngine(precision)
    draft = load_draft(cfg, model)  # decoding.draft=ckpt:PATH's model, else None
    stats = SpeculativeStats() if cfg.draft is not None else None
    outputs: list[Any] = [None] * len(src_ids)
    generated, start = 0, time.perf_counter()
    for idx in length_batches([len(s) for s in src_ids], max_tokens, cfg.rows_per_source):
        ids, pad = pad_batch([src_ids[i] for i in idx], model.cfg.pad_id, device)
        forced = None if prefixes is None else [prefixes[i] for i in idx]
        guided = None if constraints is None else [constraints[i] for i in idx]
        out = decoder.decode(model, DecodeBatch(ids, pad, cfg, forced, guided, draft, stats))
        generated += int(out.lengths.sum())
        for row, i in enumerate(idx):
            outputs[i] = [(out.sequences[row, j, : out.lengths[row, j]].tolist(), float(out.scores[row, j]),
                           out.token_logprobs[row, j, : out.lengths[row, j]].tolist())
                          for j in range(out.sequences.shape[1])]
        if on_batch is not None:
            on_batch(len(idx))
    decoded = Decoded(outputs, src_ids, truncated, generated, max(time.perf_counter() - start, 1e-9),
                      speculation=stats)
    if cfg.mbr is not None:
        apply_mbr(decoded, tokenizer, cfg, sources)
    return decoded


def check_all_constraints(cfg: DecodingConfig, model_cfg: ModelConfig, src_ids: Sequence[Sequence[int]],
                          constraints: Sequence[Sequence[Sequence[int]]], names: Sequence[str] | None) -> None:
    """Every source's constraints against its own length limit, before any decoding (a refusal names the
    source as the user knows it: its input line, its test example)."""
    lengths = torch.tensor([len(s) for s in src_ids])
    pad = torch.arange(max(map(len, src_ids), default=1))[None, :] >= lengths[:, None]  # (N, S) True at padding
    limits = search_limits(cfg, model_cfg, pad).tolist()
    for i, (c, limit) in enumerate(zip(constraints, limits, strict=True)):
        check_constraints(c, names[i] if names is not None else f"source {i}", limit)


def apply_mbr(decoded: Decoded, tokenizer: Tokenizer, cfg: DecodingConfig, sources: Sequence[str]) -> None:
    """Reorder each source's hypotheses by expected utility (MBR), keeping the n_best distinct best;
    a hypothesis's score becomes its expected utility. The candidates stay in `decoded.mbr`."""
    assert cfg.mbr is not None
    start = time.perf_counter()
    n = cfg.mbr.candidates
    choices, pseudo = [], []
    for i, hyps in enumerate(decoded.hypotheses):
        texts = [tokenizer.decode_target(ids) for ids, _, _ in hyps]
        refs = texts[n:] if cfg.mbr.references is not None else None
        choice = choose(cfg.mbr, texts[:n], refs, sources[i])
        decoded.hypotheses[i] = [(hyps[j][0], choice.expected_utility[j], hyps[j][2])
                                 for j in ranked_distinct(choice, cfg.n_best)]
        choices.append(choice)
        pseudo.append(refs)
    decoded.mbr = choices
    decoded.pseudo_references = pseudo if cfg.mbr.references is not None else None
    decoded.mbr_seconds = time.perf_counter() - start


def evaluate(model: Model, tokenizer: Tokenizer, examples: Sequence[Example],
             cfg: DecodingConfig, settings: EvalSettings, engine: Any = None) -> tuple[list[Record], dict[str, Any]]:
    """Decode `examples`, score references, and return per-example records and corpus metrics.
    engine: None for seqlab's search, or a CTranslate2 engine (engines.choice)."""
    progress = Progress(len(examples), f"decoding {run_label(cfg.label, settings.precision)}")
    # fairseq's --prefix-size: the first tokens of each reference are forced, the model goes on from there
    prefixes = prefix_ids(tokenizer, [e.target for e in examples], cfg.prefix_size) if cfg.prefix_size else None
    # Post & Vilar 2018's setting: words of each reference as the constraints of its source
    words = ([reference_words(e.target, cfg.constraint_words, cfg.seed, e.id) for e in examples]
             if cfg.constraint_words else None)
    # a drawn word the tokenizer keeps nothing of is no constraint (the user did not ask for it)
    constraints = ([[c for c in cs if c] for cs in constraint_ids(tokenizer, words)] if words is not None
                   else None)
    if settings.score_references and model.cfg.layout.one_sequence:  # before decoding, not after it
        check_references_fit(tokenizer, model.cfg, examples)
    try:
        decoded = decode_texts(model, tokenizer, [e.source for e in examples], cfg, settings.max_tokens, progress,
                               settings.precision, engine, prefixes, constraints,
                               names=[f"test example {e.id}" for e in examples])
    finally:
        progress.close()
    src_ids = decoded.src_ids
    lengths = source_lengths(src_ids, model.cfg.eos_id)
    records = []
    for i, (ex, hyps) in enumerate(zip(examples, decoded.hypotheses, strict=True)):
        nbest = [{"text": tokenizer.decode_target(ids), "score": s, "logprob": sum(lp), "tokens": len(ids)}
                 for ids, s, lp in hyps]
        records.append(Record(ex.id, ex.source, ex.target, nbest[0]["text"], nbest, hyps[0][2],
                              references=list(ex.references) if ex.extra_references else None,
                              source_tokens=lengths[i],
                              mbr=decoded.mbr[i] if decoded.mbr else None,
                              pseudo_references=decoded.pseudo_references[i] if decoded.pseudo_references else None,
                              constraints=words[i] if words is not None else None))

    metrics = corpus_metrics(records, examples, decoded, cfg, settings)
    if constraints is not None:
        metrics.update(constraint_summary([hyps[0][0] for hyps in decoded.hypotheses], constraints))
    if settings.score_references:
        ref_lps = score_references(model, tokenizer, [r.reference for r in records], src_ids, settings.max_tokens)
        for record, lps in zip(records, ref_lps, strict=True):
            record.reference_token_logprobs = lps
        metrics.update(logprob_summary(ref_lps, "ref"))
    add_neural_metrics(records, metrics, settings.metrics, settings.neural, settings.ci_seed, settings.n_bootstrap)
    return records, metrics


def corpus_metrics(records: Sequence[Record], examples: Sequence[Example], decoded: Decoded, cfg: DecodingConfig,
                   settings: EvalSettings) -> dict[str, Any]:
    """The test set's metrics from its records: sacreBLEU's (and ROUGE) with intervals, by source length,
    log-probs, diversity and repetition, lengths, speed, and MBR's where it chose."""
    hyps_text = [r.hypothesis for r in records]
    refs_text = [r.reference for r in records]  # the first reference: lengths
    streams = [list(refs) for refs in zip(*(e.references for e in examples), strict=True)]  # (n_refs, N)
    metrics: dict[str, Any] = {"n_examples": len(records), "n_truncated_sources": decoded.n_truncated}
    metrics["n_references"] = len(streams)
    metrics.update(sacrebleu_scores(hyps_text, streams, settings.metrics))
    metrics.update(by_source_length(hyps_text, streams, [r.source_tokens for r in records], settings.metrics))
    metrics.update(segment_means(hyps_text, streams, settings.metrics))
    if settings.n_bootstrap > 1:
        for name, interval in intervals(hyps_text, streams, settings.ci_seed, settings.n_bootstrap,
                                        settings.metrics).items():
            metrics[K.ci(name)] = [interval.low, interval.high]
    metrics.update(logprob_summary([r.token_logprobs for r in records], "hyp"))
    metrics.update(corpus_distinct(hyps_text))
    metrics.update(repetition(hyps_text))
    metrics[K.HYP_LEN] = sum(len(h.split()) for h in hyps_text) / max(len(records), 1)
    metrics[K.REF_LEN] = sum(len(r.split()) for r in refs_text) / max(len(records), 1)
    metrics.update(short_outputs(hyps_text, refs_text))
    if cfg.rows_per_source > 1:
        metrics.update(sample_diversity([[n["text"] for n in r.nbest] for r in records]))
    metrics[K.TOKENS_PER_S] = decoded.generated_tokens / decoded.seconds
    metrics[K.SENTENCES_PER_S] = len(records) / decoded.total_seconds
    metrics[K.DECODE_SECONDS] = decoded.total_seconds
    if decoded.mbr is not None:
        metrics.update(mbr_summary(decoded))
    if decoded.speculation is not None:
        metrics.update({K.DRAFT_ACCEPTANCE: decoded.speculation.acceptance,
                        K.TOKENS_PER_CALL: decoded.speculation.tokens_per_call,
                        K.DRAFT_SECONDS: decoded.speculation.draft_seconds})
    return metrics


def target_parts(tokenizer: Tokenizer, texts: Sequence[str]) -> list[tuple[list[int], list[int]]]:
    """Each text's target ids as (what the target template puts before the text, the text's own ids): an
    imported family's opening language code or BOS (`TextLayout.split`), then the text; EOS and whatever
    follows the text (mBART-cc25's code) never. seqlab's own targets are the text and EOS."""
    encoded = tokenizer.encode_target(list(texts))
    layout = tokenizer.layout
    if layout is None:
        eos = tokenizer.eos_id
        return [([], [t for t in ids if t != eos]) for ids in encoded]
    return [layout.split(ids, "target")[:2] for ids in encoded]


def prefix_ids(tokenizer: Tokenizer, texts: Sequence[str], size: int | None = None) -> list[list[int]]:
    """Each text's target token ids as a forced prefix: what every output of the model opens with (the
    template's opening ids, e.g. mBART-50's target code), then the text, at most `size` ids in all."""
    return [(opening + text)[:size] for opening, text in target_parts(tokenizer, texts)]


def constraint_ids(tokenizer: Tokenizer, phrases: Sequence[Sequence[str]]) -> list[list[list[int]]]:
    """Each source's phrases as target token ids, the phrase's own ids alone (`target_parts`: no language
    code, BOS or EOS; every phrase encoded in one call); a phrase that tokenizes to nothing stays empty, for
    `check_constraints` to refuse by name."""
    flat = iter(text for _, text in target_parts(tokenizer, [p for source in phrases for p in source]))
    return [[next(flat) for _ in source] for source in phrases]


def constraint_summary(best: Sequence[Sequence[int]], constraints: Sequence[Sequence[Sequence[int]]]
                       ) -> dict[str, float]:
    """% of the constraints the best hypotheses contain, and of the sources that contain all of theirs."""
    counts = [met(hyp, c) for hyp, c in zip(best, constraints, strict=True)]
    total = sum(len(c) for c in constraints)
    every = sum(n == len(c) for n, c in zip(counts, constraints, strict=True))
    return {K.CONSTRAINTS_MET: 100.0 * sum(counts) / max(total, 1),
            K.CONSTRAINED_ALL_MET: 100.0 * every / max(len(constraints), 1)}


def short_outputs(hyps: Sequence[str], refs: Sequence[str]) -> dict[str, float]:
    """% of empty hypotheses, and of hypotheses under half their reference's length in words (the
    short outputs that large beams favour: Koehn & Knowles 2017, Stahlberg & Byrne 2019)."""
    n = max(len(hyps), 1)
    empty = sum(not h.strip() for h in hyps)
    short = sum(len(h.split()) < 0.5 * len(r.split()) for h, r in zip(hyps, refs, strict=True))
    return {K.EMPTY_SHARE: 100.0 * empty / n, K.SHORT_SHARE: 100.0 * short / n}


def mbr_summary(decoded: Decoded) -> dict[str, float]:
    """What MBR did: time split between candidates and utilities, the chosen expected utility, and how
    many distinct candidates it chose among."""
    choices = decoded.mbr or []
    n = max(len(choices), 1)
    return {
        K.GENERATE_SECONDS: decoded.seconds, K.MBR_SECONDS: decoded.mbr_seconds,
        K.MBR_EXPECTED_UTILITY: sum(c.expected_utility[c.chosen] for c in choices) / n,
        K.MBR_DISTINCT: sum(len(set(c.candidates)) for c in choices) / n,
    }


def as_generated(tokenizer: Tokenizer, texts: Sequence[str], cfg: ModelConfig) -> list[list[int]]:
    """Target ids of texts as the model generates them: a model seqlab trains, its target layout (the text,
    then EOS); an imported causal LM (start=prompt), the continuation of a prompt (the text's tokens, then its
    end token, no start token before them)."""
    if cfg.layout.continues_prompt:
        return tokenizer.encode_continuation(list(texts))
    return tokenizer.encode_target(list(texts))


def check_references_fit(tokenizer: Tokenizer, cfg: ModelConfig, examples: Sequence[Example]) -> None:
    """A one-stack model scores a reference after its prompt, in the same positions: a pair that does not fit
    is refused before anything is decoded, naming the example."""
    prompts = tokenizer.encode_source([e.source for e in examples])
    targets = as_generated(tokenizer, [e.target for e in examples], cfg)
    for e, p, t in zip(examples, prompts, targets, strict=True):
        if len(p) + len(t) > cfg.max_positions:
            raise ConfigError(f"test example {e.id}: its prompt ({len(p)} tokens) and reference ({len(t)}) take "
                              f"{len(p) + len(t)} positions, more than model.max_positions={cfg.max_positions}, so its "
                              "reference log-prob cannot be scored; set score_references=false, or shorten it")


def score_references(model: Model, tokenizer: Tokenizer, refs: Sequence[str],
                     src_ids: Sequence[list[int]], max_tokens: int) -> list[list[float]]:
    """Per-token log-probs of each reference by teacher forcing, as the model would generate it (its end token
    included; an imported causal LM's without the start token a prompt opens with: `as_generated`)."""
    device = next(model.parameters()).device
    top, eos = model.cfg.max_positions - 1, model.cfg.eos_id
    tgt_ids = [truncate(t, top, eos) for t in as_generated(tokenizer, refs, model.cfg)]
    result: list[list[float]] = [[] for _ in refs]
    lengths = [max(len(s), len(t)) for s, t in zip(src_ids, tgt_ids, strict=True)]
    for idx in length_batches(lengths, max_tokens, 1):
        ids, pad = pad_batch([src_ids[i] for i in idx], model.cfg.pad_id, device)
        tgt, _ = pad_batch([tgt_ids[i] for i in idx], model.cfg.pad_id, device)
        lps = score(model, ids, pad, tgt, torch.tensor([len(tgt_ids[i]) for i in idx]))
        for row, i in enumerate(idx):
            result[i] = lps[row, : len(tgt_ids[i])].tolist()
    return result
