"""CTranslate2's search on an export of a checkpoint (interop.ct2), used like `seqlab.decoding.generate`.

What it takes of a DecodingConfig is declared with each option (decoding.options, consumer `ctranslate2`):
greedy and beam search, n-best lists, length normalization, length limits, and bans (pad and the decoder
start, `suppress_tokens`, `bad_words_ids`, `min_length`, `no_repeat_ngram_size`), which CTranslate2 applies
before its softmax: its beam scores are then seqlab's with `renormalize_logits=true`, so beam search with a ban
needs that setting. Everything else is refused by name before decoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from seqlab.config import ConfigError
from seqlab.constants import DEFAULT_IDS, HasSpecialIds
from seqlab.data.sequences import pad_right
from seqlab.data.tokenizer import Tokenizer
from seqlab.decoding import DecodingConfig, GenerateOutput, score
from seqlab.decoding.engine import BaseEngine, DecodeBatch
from seqlab.decoding.generate import search_limits
from seqlab.decoding.methods import mapping, method_of
from seqlab.decoding.options import refusals
from seqlab.decoding.prompts import check_layout
from seqlab.decoding.registry import suppressed
from seqlab.decoding.search import normalized
from seqlab.digest import file_digest
from seqlab.engines.own_process import OwnProcess
from seqlab.interop.ct2 import ct2_class, export_ctranslate2, vocabulary
from seqlab.model import Model, ModelConfig


def check_decodable(cfg: DecodingConfig, ids: HasSpecialIds = DEFAULT_IDS) -> None:
    """Fail, naming the key, on a decoding setting the CTranslate2 engine does not reproduce for a model of
    these special ids (seqlab's own before a checkpoint is loaded)."""
    problems = refusals(cfg, "ctranslate2", ids)
    if problems:
        raise ConfigError(problems[0] + (f" ({len(problems) - 1} more: {'; '.join(problems[1:])})"
                                         if len(problems) > 1 else ""))


def limit_groups(limits: list[int], cfg: DecodingConfig, lengths: list[int] | None = None
                 ) -> list[tuple[int, list[int]]]:
    """(length limit, the sources' indices) per call of CTranslate2, which takes one limit per batch: greedy
    search decodes the batch to its longest limit and cuts each output at its own (the same tokens); beam
    search decodes each limit's sources apart, since where a beam ends changes which beams survive. `lengths`
    (a Generator's prompt lengths): beam search also decodes each prompt length apart, since the Generator
    forwards only the batch's shortest prompt length at once and forces the rest of each prompt through its
    search, where those tokens' log-probs join the beams' scores. A Generator's greedy search decodes each
    limit apart as well: a limit can be the room a prompt leaves in the positions, which a longer one would
    pass."""
    beams = method_of(cfg).beams
    if not beams and lengths is None:
        return [(max(limits), list(range(len(limits))))]
    groups: dict[tuple[int, int], list[int]] = {}
    for i, limit in enumerate(limits):
        length = lengths[i] if lengths is not None and beams else 0
        groups.setdefault((limit, length), []).append(i)
    return [(limit, rows) for (limit, _), rows in sorted(groups.items())]


def banned_ids(cfg: DecodingConfig, model: ModelConfig) -> list[list[int]]:
    """CTranslate2's `suppress_sequences` for seqlab's bans, as ids: the tokens never emitted
    (registry.suppressed: the pad/start rule and `suppress_tokens`) and `bad_words_ids` (a sequence is never
    completed: its last token is banned after the rest, as Hugging Face's NoBadWordsLogitsProcessor; EOS alone
    is dropped as there)."""
    ids = [[i] for i in suppressed(cfg, model)]
    return ids + [list(s) for s in cfg.bad_words_ids or [] if list(s) != [model.eos_id]]


def requests(cfg: DecodingConfig, model: ModelConfig, src_pad_mask: torch.Tensor) -> list[Request]:
    """The calls of `translate_batch` that decode a batch as seqlab's search would (refused by name where
    decoding.options says CTranslate2 cannot)."""
    limits = search_limits(cfg, model, src_pad_mask).tolist()
    lengths = (~src_pad_mask).sum(1).tolist() if model.layout.one_sequence else None
    return [request(cfg, model, rows, [limits[i] for i in rows], limit)
            for limit, rows in limit_groups(limits, cfg, lengths)]


def request(cfg: DecodingConfig, model: ModelConfig, rows: list[int], limits: list[int], top: int) -> Request:
    """One call for `rows` decoded to `top` tokens, each cut at its own limit; refused by name where
    decoding.options says CTranslate2 cannot decode `cfg`."""
    check_decodable(cfg, model)
    check_layout(cfg, model)
    options = dict(**mapping(cfg, "ctranslate2"), num_hypotheses=cfg.n_best,
                   length_penalty=cfg.length_penalty, min_decoding_length=cfg.min_length,
                   no_repeat_ngram_size=cfg.no_repeat_ngram_size or 0, return_scores=False,
                   max_decoding_length=top)
    if model.extra_eos_ids:  # any of them ends a hypothesis; which one did stays in it
        options.update(end_token=list(model.end_ids), return_end_token=True)
    return Request(rows, limits, options, banned_ids(cfg, model))


@dataclass(frozen=True)
class Request:
    """One call of `translate_batch`: the batch's rows it decodes, each row's own length limit, the call's
    options, and the banned sequences as ids (the engine names them by their pieces)."""

    rows: list[int]
    limits: list[int]
    options: dict[str, Any]
    banned: list[list[int]]


# translate_batch's names of the options, as generate_batch (a Generator's) names them
GENERATOR_OPTIONS = {"max_decoding_length": "max_length", "min_decoding_length": "min_length"}


def generator_prompt(source: list[int], cfg: ModelConfig) -> list[int]:
    """What a Generator continues for a decoder-only model's source: an imported causal LM's prompt as it is
    (model.start=prompt), or a model seqlab trained followed by its decoder start token (model.start=bos), the
    sequence seqlab's own search continues."""
    return list(source) if cfg.layout.continues_prompt else [*source, cfg.bos_id]


class CT2Engine(BaseEngine):
    """A CTranslate2 Translator (an encoder-decoder) or Generator (a decoder-only model) of one exported
    checkpoint, used like `seqlab.decoding.generate`.

    Its tokens come from CTranslate2's search; their token log-probs and the reported scores are
    seqlab's (teacher-forced by the same weights in fp32), so metrics mean the same for both
    engines.
    """

    def __init__(self, path: Path, model: Model, tokenizer: Tokenizer | None, compute_type: str = "float32",
                 threads: int | None = None, device: str = "cpu", device_index: int = 0,
                 own_process: bool = False) -> None:
        """`own_process`: CTranslate2 runs in a spawned process of its own (engines.own_process: a bench timing
        it beside PyTorch)."""
        self.path, self.model = Path(path), model
        kind = ct2_class(model.cfg)  # a Translator or a Generator, as the model's layout says
        options = dict(device=device, device_index=device_index, compute_type=compute_type,
                       intra_threads=threads or torch.get_num_threads())
        if own_process:
            self.engine: Any = OwnProcess(kind, str(path), **options)
        else:
            import ctranslate2

            self.engine = getattr(ctranslate2, kind)(str(path), **options)
        self.src_tokens = vocabulary(tokenizer, "src", model.cfg.src_vocab_size, model.cfg)
        tgt = vocabulary(tokenizer, "tgt", model.cfg.target_vocab_size, model.cfg)
        self.tgt_pieces, self.tgt_index = tgt, {t: i for i, t in enumerate(tgt)}

    def search(self, sources: list[list[int]], options: dict[str, Any],
               banned: list[list[str]] | None) -> list[list[list[str]]]:
        """Per source, CTranslate2's hypotheses as pieces (without their end token, unless `options` lists
        end tokens as ids: then with the one that ended it)."""
        if "end_token" in options:
            options = {**options, "end_token": [self.tgt_pieces[i] for i in options["end_token"]]}
        if self.model.cfg.layout.cross_attention:  # a Translator
            results = self.engine.translate_batch([[self.src_tokens[i] for i in s] for s in sources],
                                                  suppress_sequences=banned, **options)
        else:
            named = {GENERATOR_OPTIONS.get(k, k): v for k, v in options.items()}
            prompts = [[self.tgt_pieces[i] for i in generator_prompt(s, self.model.cfg)] for s in sources]
            results = self.engine.generate_batch(prompts, suppress_sequences=banned, include_prompt_in_result=False,
                                                 **named)
        return [r.sequences if hasattr(r, "sequences") else r.hypotheses for r in results]

    @property
    def pipe_seconds(self) -> float:
        """Seconds spent so far in the pipe to the engine's own process (0 when it runs in this one)."""
        return getattr(self.engine, "overhead", 0.0)

    @classmethod
    def for_checkpoint(cls, checkpoint: Path, model: Model, tokenizer: Tokenizer, cache_dir: Path,
                       quantization: str | None = None, compute_type: str = "float32",
                       own_process: bool = False) -> CT2Engine:
        """Export the checkpoint once into cache_dir (keyed on the file's digest and the quantization)."""
        folder = Path(cache_dir) / "ctranslate2" / f"{file_digest(checkpoint)[:16]}-{quantization or 'float32'}"
        if not (folder / "model.bin").is_file():
            export_ctranslate2(model, tokenizer, folder, quantization)
        return cls(folder, model, tokenizer, compute_type, own_process=own_process)

    def nbest(self, sources: list[list[int]], request: Request) -> list[list[list[int]]]:
        """Per source of the request, its n-best token ids within its own limit (EOS appended where the
        hypothesis ended before CTranslate2's limit)."""
        banned = [[self.tgt_pieces[i] for i in seq] for seq in request.banned]
        results = self.search([sources[r] for r in request.rows], request.options, banned or None)
        eos, top = self.model.cfg.eos_id, request.options["max_decoding_length"]
        if request.options.get("return_end_token"):  # the end token, where one ended it, is in the hypothesis
            return [[[self.tgt_index[t] for t in h][:limit] for h in hyps]
                    for hyps, limit in zip(results, request.limits, strict=True)]
        return [[([self.tgt_index[t] for t in h] + ([eos] if len(h) < top else []))[:limit] for h in hyps]
                for hyps, limit in zip(results, request.limits, strict=True)]

    def translate_ids(self, sources: list[list[int]], cfg: DecodingConfig, max_length: int) -> list[list[list[int]]]:
        """Per source, its n-best token ids, every source decoded to one length limit (the bench's)."""
        rows = list(range(len(sources)))
        return self.nbest(sources, request(cfg, self.model.cfg, rows, [max_length] * len(rows), max_length))

    @torch.no_grad()
    def decode(self, model: Model, batch: DecodeBatch) -> GenerateOutput:
        """`generate`'s output for a batch: (B, n, T) sequences, seqlab's scores and token log-probs (a draft model
        and its stats change nothing CTranslate2 decodes: decoding.options declares `draft` inert here)."""
        if batch.target_prefix is not None:
            raise ConfigError("engine=ctranslate2 scores a forced target prefix its own way (outside its length "
                              "normalization); use engine=seqlab for decoding.prefix_size or a target prefix")
        if batch.constraints is not None:
            raise ConfigError("engine=ctranslate2 has no lexical constraints; use engine=seqlab for "
                              "decoding.constraints")
        src_ids, src_pad_mask, cfg = batch.src_ids, batch.src_pad_mask, batch.cfg
        sources = [row[~pad].tolist() for row, pad in zip(src_ids, src_pad_mask, strict=True)]
        nbest: list[list[list[int]]] = [[] for _ in sources]
        for request in requests(cfg, model.cfg, src_pad_mask):
            for row, hyps in zip(request.rows, self.nbest(sources, request), strict=True):
                nbest[row] = hyps
        n = cfg.n_best
        flat = [h for hyps in nbest for h in (hyps + [hyps[-1]] * n)[:n]]  # a short n-best list repeats its last
        tgt, _ = pad_right(flat, model.cfg.pad_id)
        lengths = torch.tensor([len(h) for h in flat])
        rows = src_ids.repeat_interleave(n, 0), src_pad_mask.repeat_interleave(n, 0)
        lps = score(model, *rows, tgt.to(src_ids.device), lengths)
        total = lps.sum(-1)
        scores = normalized(total, lengths.float(), cfg.length_penalty) if method_of(cfg).beams else total
        b = src_ids.shape[0]
        return GenerateOutput(tgt.view(b, n, -1), scores.view(b, n), lps.view(b, n, -1), lengths.view(b, n))
