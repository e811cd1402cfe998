"""What each engine and export format does with a DecodingConfig option, its short name in labels, the
processor it builds, and whether an archived stage's digest carries it at its default: one `Option`, declared
with the option's field (decoding.config: `name: type = option(default, ...)`).

An engine or format takes an option only where its declaration says how (an allowlist). `MAPPED` means it
computes the option exactly; a `Check` takes it unless the check names a reason it cannot (a value, or a
combination with another option); `Inert` says why the option changes nothing there (a label, a seed that
greedy and beam search never read); `Refused` (the default) takes the option only at its default. A field
declared without an `Option` is refused by every engine and format, never ignored: `refusals(cfg, consumer)`
is the one check each of them calls, and `tests/unit/test_options.py` walks every field against each consumer.

Consumers: `ctranslate2`, the CTranslate2 engine (engines.ct2); `hf`, the `generation_config.json` an export
writes for Hugging Face's `generate` (interop.generation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal

from seqlab.constants import DEFAULT_IDS, HasSpecialIds
from seqlab.decoding.methods import method_of, refusal
from seqlab.decoding.registry import Builds, suppressed

# A DecodingConfig (decoding.config declares its fields with this module's rules, so this one does not import it).
DecodingConfig = Any

Consumer = Literal["ctranslate2", "hf"]
CONSUMERS: dict[str, str] = {"ctranslate2": "engine=ctranslate2", "hf": "Hugging Face's generation_config.json"}
# what to do instead, per consumer, at the end of a refusal
INSTEAD = {"ctranslate2": "or use engine=seqlab", "hf": "before exporting (seqlab decodes it; generate cannot)"}
# a reason the consumer cannot honour the setting for a model of these special ids, or None
Check = Callable[[DecodingConfig, HasSpecialIds], str | None]


@dataclass(frozen=True)
class Inert:
    """The option changes nothing this consumer computes, for this reason."""

    why: str


@dataclass(frozen=True)
class Refused:
    """The consumer takes the option at its default only; `why` (if given) says why it cannot do more."""

    why: str | None = None


MAPPED = True  # the consumer computes the option exactly
REFUSED = Refused()  # the default: taken at its default value only
Rule = bool | Inert | Refused | Callable[..., Any]


@dataclass(frozen=True)
class Option:
    """One DecodingConfig field as every engine and format takes it."""

    ctranslate2: Rule = REFUSED
    hf: Rule = REFUSED
    # False: left out of an archived stage's digest while at its default (the options added before the archive's
    # keys were frozen, app.frozen_keys; one added now is left out at its default without it); True: always
    # part of the digest
    in_digest: bool = True
    label: str | None = None  # its short name in a setting's label where set (a value, or a list's length)
    processor: Builds | None = None  # the logits processor it builds, at its place in HF's order (decoding.registry)
    sampling_only: bool = False  # it shapes what sampling draws from: set only with method=sample


def option(default: Any, **declared: Any) -> Any:
    """A DecodingConfig field with its default and its declaration (the keywords of `Option`)."""
    return field(default=default, metadata={"option": Option(**declared)})


def declared(config: Any) -> dict[str, Option | None]:
    """Each field of a DecodingConfig (class or instance) -> its declaration, None where it has none."""
    return {f.name: f.metadata.get("option") for f in fields(config)}


def _beam(cfg: DecodingConfig) -> bool:
    return method_of(cfg).beams


def method_rule(consumer: Consumer) -> Check:
    """`method`'s rule for `consumer`: the search method's own declaration maps it or says why not."""

    def check(cfg: DecodingConfig, ids: HasSpecialIds) -> str | None:
        return refusal(cfg, consumer)

    return check


def ct2_stop(cfg: DecodingConfig, ids: HasSpecialIds) -> str | None:
    if _beam(cfg) and cfg.early_stopping is not True:
        return (f"CTranslate2's beam search stops at num_beams finished hypotheses (early_stopping=true), not "
                f"decoding.early_stopping={cfg.early_stopping}; set early_stopping=true")
    return None


def ct2_length_penalty(cfg: DecodingConfig, ids: HasSpecialIds) -> str | None:
    if _beam(cfg) and cfg.length_penalty == 0:
        return ("CTranslate2's beam search without length normalization (decoding.length_penalty=0) stops when "
                "its best beam finishes, not at num_beams finished hypotheses; use a length_penalty other than 0")
    return None


def ct2_bans(cfg: DecodingConfig) -> list[str]:
    """The options that make CTranslate2 ban tokens (its `suppress_sequences`, min and no-repeat lengths)."""
    named = {"suppress_special": cfg.suppress_special, "suppress_tokens": cfg.suppress_tokens,
             "bad_words_ids": cfg.bad_words_ids, "min_length": cfg.min_length,
             "no_repeat_ngram_size": cfg.no_repeat_ngram_size}
    return [key for key, value in named.items() if value]


def ct2_ban(key: str) -> Check:
    """CTranslate2 bans before its softmax, so its beam scores are renormalized after each ban: seqlab's equal
    search is the same ban with `renormalize_logits=true` (greedy's argmax is the same either way)."""

    def check(cfg: DecodingConfig, ids: HasSpecialIds) -> str | None:
        if _beam(cfg) and key in ct2_bans(cfg) and not cfg.renormalize_logits:
            return (f"CTranslate2's beam search bans tokens before its softmax (decoding.{key}="
                    f"{getattr(cfg, key)!r}), which renormalizes the scores: seqlab's equal search is "
                    f"decoding.renormalize_logits=true; set it, or turn decoding.{key} off")
        return None

    return check


def _one_sequence(ids: HasSpecialIds) -> bool:
    """Whether CTranslate2 would decode the model as one sequence, with its Generator (a ModelConfig's layout
    says; bare special ids are an encoder-decoder's)."""
    layout = getattr(ids, "layout", None)
    return layout is not None and layout.one_sequence


PROMPT_BLIND = ("CTranslate2's Generator matches {what} within the generated tokens only, where seqlab and Hugging "
                "Face read the prompt before them: turn decoding.{key}={value!r} off")


def ct2_no_repeat(cfg: DecodingConfig, ids: HasSpecialIds) -> str | None:
    """CTranslate2 leaves the decoder start token out of the n-grams it blocks, Hugging Face (and seqlab)
    count it: the same only where the start token can never be emitted again (banned, or EOS itself). Its
    Generator also leaves a causal LM's prompt out of them (measured: no-repeat 1 and 2 on GPT-2 shapes)."""
    if cfg.no_repeat_ngram_size and _one_sequence(ids):
        return PROMPT_BLIND.format(what="no-repeat n-grams", key="no_repeat_ngram_size",
                                   value=cfg.no_repeat_ngram_size)
    if not cfg.no_repeat_ngram_size or ids.bos_id == ids.eos_id or ids.bos_id in suppressed(cfg, ids):
        return ct2_ban("no_repeat_ngram_size")(cfg, ids)
    return (f"CTranslate2's no-repeat n-grams leave out the decoder start token (id {ids.bos_id}), which "
            f"decoding.no_repeat_ngram_size={cfg.no_repeat_ngram_size} counts and which may be emitted here: "
            f"ban it (decoding.suppress_special=true or suppress_tokens=[{ids.bos_id}])")


def ct2_bad_words(cfg: DecodingConfig, ids: HasSpecialIds) -> str | None:
    """A banned sequence of several tokens may begin in a causal LM's prompt, which CTranslate2's Generator
    does not match (single tokens are the same either way)."""
    if _one_sequence(ids) and any(len(s) > 1 for s in cfg.bad_words_ids or []):
        return PROMPT_BLIND.format(what="banned sequences", key="bad_words_ids", value=cfg.bad_words_ids)
    return ct2_ban("bad_words_ids")(cfg, ids)


def hf_force_eos(cfg: DecodingConfig, ids: HasSpecialIds) -> str | None:
    if cfg.force_eos == "fairseq":
        return ("Hugging Face forces EOS scored 0 (decoding.force_eos=hf); fairseq's rule, EOS keeping its "
                "log-prob, has no generate option: use force_eos=hf or false")
    return None


def hf_per_source_limit(key: str) -> Check:
    def check(cfg: DecodingConfig, ids: HasSpecialIds) -> str | None:
        if cfg.max_length is None and getattr(cfg, key) != default(cfg, key):
            return (f"generate has one length limit, not fairseq's per-source max_len_a * src_len + max_len_b "
                    f"(decoding.{key}={getattr(cfg, key)!r}); set decoding.max_length (without it the export "
                    "writes the model's position limit)")
        return None

    return check


NO_SEED = Inert("greedy and beam search draw nothing; CTranslate2 samples nothing seqlab decodes through it")
HF_SEED = Inert("a seed picks draws, not the distribution: generate draws with torch's own generator")
NAME = Inert("a label for reports")
RENORMALIZED = Inert("CTranslate2 bans before its softmax, so its scores are normalized after the bans either way")
SPECULATIVE = Inert("a draft changes how fast the same tokens come, not which: decoding without it gives them")
BEAM_ONLY = Inert("read by beam search only")  # HF refuses beam options without beams: written for beam alone

def default(cfg: DecodingConfig, key: str) -> Any:
    """A DecodingConfig field's default value (`cfg`: the config or its class)."""
    field = cfg.__dataclass_fields__[key]
    return field.default if field.default is not MISSING else field.default_factory()


def refusals(cfg: DecodingConfig, consumer: Consumer, ids: HasSpecialIds = DEFAULT_IDS) -> list[str]:
    """Each setting of `cfg` that `consumer` cannot honour for a model of these special ids (seqlab's own
    before a checkpoint is loaded), as a message naming its key; empty: it takes all."""
    out = []
    for key, option in declared(cfg).items():
        value = getattr(cfg, key)
        rule = REFUSED if option is None else getattr(option, consumer)
        if rule is MAPPED or isinstance(rule, Inert):
            continue
        if isinstance(rule, Refused):
            if value != default(cfg, key):
                why = f" ({rule.why})" if rule.why else ""
                out.append(f"{CONSUMERS[consumer]} cannot honour decoding.{key}={value!r}{why}; set it to "
                           f"{default(cfg, key)!r} {INSTEAD[consumer]}")
            continue
        why = rule(cfg, ids)
        if why is not None:
            out.append(f"{CONSUMERS[consumer]}: {why} {INSTEAD[consumer]}")
    return out


def digest_neutral(config: type) -> dict[str, Any]:
    """The options left out of an archived stage's digest at their default (`config`: DecodingConfig), with
    that default."""
    return {key: default(config, key) for key, option in declared(config).items()
            if option is not None and not option.in_digest}


def labelled(config: Any) -> dict[str, str]:
    """The options a label names (key -> short name), where set, in field order."""
    return {key: option.label for key, option in declared(config).items() if option and option.label is not None}


def sampling_only(config: Any) -> tuple[str, ...]:
    """The options that only sampling reads, in field order."""
    return tuple(key for key, option in declared(config).items() if option and option.sampling_only)
