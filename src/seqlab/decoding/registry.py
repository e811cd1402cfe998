"""How a decoding option builds its processor, and the one function that builds them all in Hugging Face's order.

A DecodingConfig field that acts on the logits declares it (decoding.options `option(..., processor=...)`):
a `Builds` says where in Hugging Face's order its processor goes and how it is made from the field's value.
`build_processors` reads those declarations off the config's fields, so adding a processor is its class and
its field's declaration; validation (DecodingConfig builds its processors), generate and the engines call it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from seqlab.constants import HasSpecialIds
from seqlab.decoding.adaptive import DynamicTemperature, EntropyTemperature, FrequencyPresencePenalty
from seqlab.decoding.methods import method_of
from seqlab.decoding.processors import (
    BadWords,
    ForcedPrefix,
    LogitNormalization,
    LogitsProcessor,
    SuppressTokens,
    Temperature,
)

# A DecodingConfig (decoding.config declares its fields with the builders here, so this module does not import it).
Settings = Any
# (the field's value, the whole config, the model's special ids) -> the processor, or None where it is off
Make = Callable[[Any, Settings, HasSpecialIds], LogitsProcessor | None]

# Hugging Face's order (`_get_logits_processor`): the penalties and constraints first, then the sampling
# warpers; a field's `Builds.order` places its processor in it. The sources' forced target prefixes go after
# the other constraints (a forced token stays forced).
PREFIX_ORDER = 90


@dataclass(frozen=True)
class Builds:
    """The processor a field builds: its place in Hugging Face's order and how it is made."""

    order: int
    make: Make


def each(cls: Callable[[Any], LogitsProcessor], order: int) -> Builds:
    """The processor built from the field's value alone, where the field is set (not None)."""
    return Builds(order, lambda value, cfg, ids: None if value is None else cls(value))


def with_eos(cls: Callable[[Any, int], LogitsProcessor], order: int) -> Builds:
    """A processor of the field's value and the model's EOS id, where the field is set (not 0 or None)."""
    return Builds(order, lambda value, cfg, ids: cls(value, ids.eos_id) if value else None)


def warper(cls: Callable[[Any], LogitsProcessor], order: int) -> Builds:
    """A sampling warper, where the method draws (contrastive search's `top_k` counts its candidates instead)."""
    return Builds(order, lambda value, cfg, ids: None if value is None or not method_of(cfg).samples else cls(value))


def temperature_rule(value: float | None, cfg: Settings, ids: HasSpecialIds) -> LogitsProcessor | None:
    """The temperature processor: dynamic (llama.cpp), entropy-based (EDT), plain, or none. Entropy-adaptive
    temperatures take the place of `temperature`, which becomes their base value."""
    base = value if value is not None else 1.0
    if cfg.dynatemp_range is not None:
        return DynamicTemperature(base, cfg.dynatemp_range, cfg.dynatemp_exponent)
    if cfg.edt_theta is not None:
        return EntropyTemperature(base, cfg.edt_theta, cfg.edt_base)
    return Temperature(value) if value is not None else None


def penalties(value: float | None, cfg: Settings, ids: HasSpecialIds) -> LogitsProcessor | None:
    """OpenAI's frequency and presence penalties, one processor for both."""
    if value is None and cfg.presence_penalty is None:
        return None
    return FrequencyPresencePenalty(value, cfg.presence_penalty)


def suppressed(cfg: Settings, ids: HasSpecialIds) -> list[int]:
    """The ids never emitted: seqlab's rule (`suppress_special`: the model's `unemitted` ids, never an end
    token) and any listed in `suppress_tokens`."""
    rule = list(ids.unemitted) if cfg.suppress_special else []
    return sorted({*rule, *(cfg.suppress_tokens or [])})


def suppression(value: bool, cfg: Settings, ids: HasSpecialIds) -> LogitsProcessor | None:
    banned = suppressed(cfg, ids)
    return SuppressTokens(banned) if banned else None


def renormalized(value: bool, cfg: Settings, ids: HasSpecialIds) -> LogitsProcessor | None:
    """A log-softmax after the other processors (HF's `renormalize_logits`), last in the order."""
    return LogitNormalization() if value else None


def bad_words(value: list[list[int]] | None, cfg: Settings, ids: HasSpecialIds) -> LogitsProcessor | None:
    return None if value is None else BadWords(value, ids.eos_id)


def builders(config: type | Settings) -> dict[str, Builds]:
    """The fields of a DecodingConfig (class or instance) that build a processor, with their builders."""
    out = {}
    for field in fields(config):
        option = field.metadata.get("option")
        if option is not None and option.processor is not None:
            out[field.name] = option.processor
    return out


def build_processors(cfg: Settings, ids: HasSpecialIds, prefix: ForcedPrefix | None = None) -> list[LogitsProcessor]:
    """Processors in Hugging Face's order, each built by its field's declaration. `prefix`: the sources' forced
    target prefixes, placed at PREFIX_ORDER.

    Each processor checks its own value, so building them is also how a DecodingConfig is validated.
    """
    placed: list[tuple[int, LogitsProcessor]] = [] if prefix is None else [(PREFIX_ORDER, prefix)]
    for key, builds in builders(cfg).items():
        processor = builds.make(getattr(cfg, key), cfg, ids)
        if processor is not None:
            placed.append((builds.order, processor))
    return [processor for _, processor in sorted(placed, key=lambda pair: pair[0])]
