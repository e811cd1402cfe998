"""What every inference command (evaluate, translate) sets up the same way: the typed request, checked
before the checkpoint loads, then the loaded model with the decoding it will actually use.

The order matters and is the same for both commands: a wrong decoding, precision or engine value fails
before the (possibly large) checkpoint is read; what only the checkpoint can tell (its corpus' task, its
own decoding defaults) is checked right after loading, before anything is decoded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from seqlab.app.configs import checkpoint_decoding, decoding_overrides, plain
from seqlab.checkpoint import AnyTokenizer, CheckpointInfo, load_for_inference, resolve, start_from
from seqlab.config import ConfigError, check_choice, check_types, resolve_device, typed
from seqlab.data import CorpusConfig
from seqlab.data.prompting import PromptSettings
from seqlab.decoding import DecodingConfig
from seqlab.decoding.engine import DecodingEngine
from seqlab.decoding.ensemble import Combination, Ensemble, check_members
from seqlab.decoding.generate import DecodePrecision
from seqlab.decoding.labels import run_label
from seqlab.decoding.mbr import check_task
from seqlab.engines.choice import Engine, check_engine, choose_engine, make_engine
from seqlab.inference.drafts import draft_file
from seqlab.inference.prompts import corpus_of, prompted
from seqlab.inference.text import Format
from seqlab.model import Model


@dataclass(frozen=True)
class InferenceSettings:
    """The keys `seqlab evaluate` and `seqlab translate` share; their configs' defaults (app.store)."""

    ckpt: str  # a .ckpt file or a training run folder (its best.ckpt)
    device: str = "auto"  # auto (CUDA when torch sees a GPU) | cpu | cuda | cuda:N
    # fp32 | bf16: the model under bf16 autocast while decoding (faster on bf16 hardware; some outputs change,
    # docs/performance.md; references are scored in fp32) | int8: int8 linear layers on a CPU (engine=seqlab or
    # seqlab_compiled) or CTranslate2's int8. Labels get _bf16 / _int8.
    precision: DecodePrecision = "fp32"
    # auto: the fastest of seqlab and seqlab_onednn here (engines.choice.choose_engine; logged) | seqlab |
    # seqlab_onednn: the same search, its fp32 linear layers on oneDNN's packed weights (a CPU; labels get
    # _onednn) | seqlab_graphs: the same search, its decoder step replayed as a CUDA graph (a GPU; labels get
    # _graphs) | seqlab_compiled: the same search, its decoder step compiled once for a CPU (fp32 or int8; pays off
    # over many calls of one source each; labels get _compiled) | ctranslate2: CTranslate2 on an export of the
    # checkpoint (cached in paths.cache_dir; greedy and beam; precision fp32 | bf16 | int8; labels get _ct2).
    engine: Engine = "auto"
    decoding_from_checkpoint: bool = False  # the checkpoint's own defaults (an imported model's generation config)
    max_tokens: int = 8000  # source tokens x beams per decoding batch
    # an imported model's language pair, Hugging Face's names (eng_Latn, en_XX, en; null: the checkpoint's), and
    # T5's task prefix ("summarize: "; null: the checkpoint's). Where the family opens the target with the target
    # language's code (mBART-50, M2M100, NLLB), decoding forces it first.
    src_lang: str | None = None
    tgt_lang: str | None = None
    task_prefix: str | None = None
    # how a causal LM is asked the task (data.prompting): a template around every source (GPT-2's
    # "{source}\nTL;DR:"), k shots before it, the model's own chat template; the defaults: the source as it is
    prompt: PromptSettings = field(default_factory=PromptSettings)
    # further checkpoints decoded together with ckpt as one model (decoding.ensemble), sharing its tokenizer;
    # their distributions combined by ensemble_rule: mean_prob (fairseq) | mean_logprob (OpenNMT-py)
    ensemble: list[str] = field(default_factory=list)
    ensemble_rule: Combination = "mean_prob"

    def check(self, owner: str) -> None:
        """Fail naming `owner.key` (eval.precision=...): the same settings serve two commands."""
        object.__setattr__(self, "prompt", PromptSettings.of(self.prompt, f"{owner}.prompt"))
        check_types(self, owner)
        check_choice(owner, "precision", self.precision, DecodePrecision)
        check_choice(owner, "engine", self.engine, Engine)
        check_choice(owner, "ensemble_rule", self.ensemble_rule, Combination)


@dataclass(frozen=True)
class TranslateSettings(InferenceSettings):
    """`seqlab translate`'s own keys besides the shared ones."""

    input: str | None = None  # a text file, one source per line; None reads stdin
    format: Format = "plain"  # plain (one hypothesis per line) | fairseq (S-/H-/P- lines, n-best)
    chunk_size: int = 2000  # lines read and decoded at a time
    # forced output beginnings, generated first and scored like the rest: each line's text after its first TAB
    # (SOURCE<TAB>PREFIX), or one text for every line
    prefix_column: bool = False
    target_prefix: str | None = None

    def check(self, owner: str) -> None:
        super().check(owner)
        check_choice(owner, "format", self.format, Format)
        if self.prefix_column and self.target_prefix is not None:
            raise ConfigError(f"{owner}.prefix_column=true and {owner}.target_prefix are two sources of prefixes; "
                              "set one")


@dataclass(frozen=True)
class DistillSettings(InferenceSettings):
    """`seqlab distill`'s own keys besides the shared ones."""

    out: str = ""  # the distilled corpus's folder (train/validation/test.jsonl.gz, distill.json)
    shard_size: int = 2000  # training sources decoded and written at a time: a cut run resumes at its shard
    limit: int | None = None  # the first N training examples only (quick looks); None = all
    force: bool = False  # decode again even if the folder holds a finished distillation

    def check(self, owner: str) -> None:
        super().check(owner)
        if not self.out:
            raise ConfigError(f"{owner}.out: name the folder the distilled corpus goes to (out=DIR)")
        if self.shard_size < 1:
            raise ConfigError(f"{owner}.shard_size={self.shard_size} must be >= 1")


log = logging.getLogger(__name__)


def chosen_engine(cfg: DictConfig, one_source: bool = False) -> str:
    """The engine a command decodes with: the config's, or for `engine=auto` this machine's choice (logged).
    A command asks once and passes the answer on, so its result folder, label, record and decoding all name
    one engine; the composed config is left as the user wrote it. `one_source`: the command decodes one
    source a call; the choice weighs that and the decoding's rows per source (`choose_engine`)."""
    if cfg.get("engine") != "auto":
        return str(cfg.get("engine"))
    try:
        device = resolve_device("", cfg.get("device", "auto"))
    except ConfigError:  # a bad device fails, named and recorded, where the request is checked
        device = str(cfg.get("device"))
    rows = typed(DecodingConfig, plain(cfg.decoding), "decoding").rows_per_source
    choice = choose_engine(str(cfg.get("precision")), device, Path(cfg.paths.cache_dir), rows, one_source)
    log.info("engine=auto: %s (%s)", choice.engine, choice.reason)
    return choice.engine


LANGUAGE_KEYS = ("src_lang", "tgt_lang", "task_prefix")  # InferenceRequest.languages, in this order


@dataclass(frozen=True)
class InferenceRequest:
    """An inference command's settings, typed and checked; nothing is loaded yet."""

    command: str  # the config that named them (eval, translate): error messages say `eval.precision=...`
    checkpoint: str
    decoding: DecodingConfig
    precision: str
    engine: str
    from_checkpoint: bool  # decode with the checkpoint's own defaults (an imported model's generation config)
    languages: tuple[str | None, str | None, str | None] = (None, None, None)  # src_lang, tgt_lang, task_prefix
    ensemble: tuple[str, ...] = ()  # further checkpoints decoded with `checkpoint` as one model
    ensemble_rule: Combination = "mean_prob"
    prompt: PromptSettings = PromptSettings()  # how the sources are asked (data.prompting)
    # decoding.* values given on the command line, applied on top of the checkpoint's own defaults
    decoding_overrides: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def from_cfg(cls, cfg: DictConfig, command: str, settings_cls: type[InferenceSettings] = InferenceSettings,
                 engine: str | None = None) -> InferenceRequest:
        """`settings_cls`: the command's own settings (TranslateSettings), all checked here, once; `engine`: the
        command's chosen engine (default: chosen here, chosen_engine). The config is read first, then typed;
        the decoding's label and draft file are settled with it, before anything loads."""
        decoding_values = plain(cfg.decoding)
        settings = settings_of(cfg, settings_cls, command, engine=engine or chosen_engine(cfg))
        overrides = tuple(decoding_overrides(cfg).items()) if settings.decoding_from_checkpoint else ()
        decoding = typed(DecodingConfig, decoding_values, "decoding")
        decoding.label  # noqa: B018  (named as it is typed: the request's label, settled before anything loads)
        check_engine(command, settings.engine, settings.precision, decoding)
        draft_file(decoding)  # a missing draft checkpoint fails before anything loads
        if settings.ensemble:
            check_members(decoding, settings.engine, command)
        return cls(command, settings.ckpt, decoding, settings.precision, settings.engine,
                   settings.decoding_from_checkpoint, (settings.src_lang, settings.tgt_lang, settings.task_prefix),
                   tuple(settings.ensemble), settings.ensemble_rule, settings.prompt, overrides)

    @cached_property
    def label(self) -> str:
        """The setting's one label, settled before anything loads: it names the result folder, the record and
        the W&B run. The decoding's label (`checkpoint` for the checkpoint's own defaults, whose values the
        record keeps), the target language when one is asked for, the precision and engine, and the
        ensemble's size and rule (docs/reliability.md, "Compatibility")."""
        decoding = "checkpoint" if self.from_checkpoint else self.decoding.label
        return run_label(decoding, self.precision, self.engine, len(self.ensemble), self.ensemble_rule,
                         self.languages[1])


@dataclass
class Loaded:
    """A checkpoint ready to decode: the model on its device, and the engine that decodes for it in the
    request's precision (decoding.engine)."""

    model: Model
    tokenizer: AnyTokenizer
    info: CheckpointInfo
    decoding: DecodingConfig  # the request's, or the checkpoint's own
    engine: DecodingEngine
    device: str
    prompt: PromptSettings = PromptSettings()  # how the sources are asked: the request's, or the checkpoint's own


def settings_of(cfg: DictConfig, cls: type, owner: str, **given: Any) -> Any:
    """The typed, checked settings `cls` (InferenceSettings or TranslateSettings) of a composed config; `given`:
    values settled by the command instead of read (the engine `engine=auto` chose)."""
    settings = typed(cls, {f.name: given[f.name] if f.name in given else plain(cfg[f.name]) for f in fields(cls)},
                     owner)
    settings.check(owner)
    return settings


def with_languages(tokenizer: AnyTokenizer, decoding: DecodingConfig, request: InferenceRequest, path: Path
                   ) -> tuple[Any, DecodingConfig]:
    """The tokenizer with the request's language pair and task prefix, and the decoding with the target code
    forced first where the family opens the target with it (the request's tgt_lang wins over a stored one)."""
    src_lang, tgt_lang, prefix = request.languages
    if not tokenizer.languages:
        given = [k for k, v in zip(("src_lang", "tgt_lang", "task_prefix"), request.languages, strict=True) if v]
        if given:
            raise ConfigError(f"{request.command}.{given[0]}: {path} has seqlab's own tokenizer, which has no "
                              "language codes or task prefix; remove the key")
        return tokenizer, decoding
    tokenizer = tokenizer.with_settings(src_lang, tgt_lang, prefix)
    forced = tokenizer.layout.forced_first
    if forced is not None and (decoding.forced_bos_token_id is None or tgt_lang is not None):
        decoding = replace(decoding, forced_bos_token_id=forced)
    return tokenizer, decoding


def load(request: InferenceRequest, device: str, cache_dir: Path, task_checked: bool = False,
         corpus: CorpusConfig | None = None, split: str | None = None) -> Loaded:
    """Load the checkpoint and build the engine. `task_checked`: the decoding was already checked against
    another corpus' task; otherwise it is checked against the checkpoint's own corpus here. `corpus` and
    `split`: what is decoded (another corpus than the checkpoint's, and its split), where a prompt's shots
    are drawn from (never the decoded split)."""
    device = resolve_device("", device)
    path = resolve(request.checkpoint)
    model, tokenizer, info = load_for_inference(path, device=device)
    if request.ensemble:
        model = ensemble_of(model, tokenizer, path, request, device)
    decoding = checkpoint_decoding(info, dict(request.decoding_overrides)) if request.from_checkpoint \
        else request.decoding
    if request.ensemble and request.from_checkpoint:  # the request's own decoding was checked in from_cfg
        check_members(decoding, request.engine, request.command)
    tokenizer, decoding = with_languages(tokenizer, decoding, request, path)
    model = start_from(model, tokenizer)
    prompt = request.prompt if not request.prompt.asks_nothing else PromptSettings.of(info.prompt, "checkpoint.prompt")
    if not prompt.asks_nothing:  # the command's prompt, else the one a fine-tuned causal LM learned
        tokenizer = prompted(tokenizer, prompt, corpus or corpus_of(info), split, request.command)
    if not task_checked and info.data_config:
        corpus = info.data_config["corpus"]
        check_task(decoding.mbr, corpus["task"], f"the checkpoint's corpus {corpus['name']}")
    engine = make_engine(request.engine, path, model, tokenizer, cache_dir, request.precision)
    return Loaded(model, tokenizer, info, decoding, engine, device, prompt)


def ensemble_of(model: Model, tokenizer: AnyTokenizer, path: Path, request: InferenceRequest,
                device: str) -> Ensemble:
    """`model` and the request's further checkpoints as one Ensemble, each checked against the first: the same
    tokenizer (so the same source ids and target pieces) and special ids, before anything is decoded."""
    members = [model]
    for given in request.ensemble:
        other_path = resolve(given)
        other, other_tokenizer, _ = load_for_inference(other_path, device=device)
        differs = [what for what, a, b in (
            ("tokenizer", tokenizer.digest, other_tokenizer.digest),
            ("target vocabulary size", model.cfg.target_vocab_size, other.cfg.target_vocab_size),
            ("special ids (pad, bos, eos)", (model.cfg.pad_id, model.cfg.bos_id, model.cfg.eos_id),
             (other.cfg.pad_id, other.cfg.bos_id, other.cfg.eos_id))) if a != b]
        if differs:
            raise ConfigError(f"{request.command}.ensemble: {other_path} has another {differs[0]} than {path}; an "
                              "ensemble's checkpoints must share the tokenizer and target vocabulary")
        members.append(other)
    return Ensemble(members, request.ensemble_rule)
