"""The one registry of decoding options: which DecodingConfig field builds which processor, in which order.

Validation (DecodingConfig builds its processors), labels and construction (generate) all read it.
"""

from __future__ import annotations

from typing import Protocol

from seqlab.constants import HasSpecialIds
from seqlab.decoding.adaptive import DynamicTemperature, EntropyTemperature, FrequencyPresencePenalty
from seqlab.decoding.processors import (
    BadWords,
    EpsilonCutoff,
    EtaCutoff,
    ForcedFirstToken,
    ForcedPrefix,
    LogitNormalization,
    LogitsProcessor,
    MinNewTokens,
    MinP,
    NoRepeatNGram,
    RepetitionPenalty,
    SequenceBias,
    SuppressTokens,
    Temperature,
    TopK,
    TopNSigma,
    TopP,
    Typical,
)

# The sampling warpers, in Hugging Face's order: DecodingConfig field -> processor.
WARPERS: dict[str, type[LogitsProcessor]] = {
    "temperature": Temperature, "top_k": TopK, "top_p": TopP, "min_p": MinP, "typical_p": Typical,
    "epsilon": EpsilonCutoff, "eta": EtaCutoff, "top_n_sigma": TopNSigma,
}
# Entropy-adaptive temperatures take the place of `temperature` (which becomes their base value).
ADAPTIVE_TEMPERATURES = ("dynatemp_range", "edt_theta")
SAMPLING_ONLY = (*WARPERS, *ADAPTIVE_TEMPERATURES)


class ProcessorSettings(Protocol):
    """The settings the processors are built from: what DecodingConfig has (and a test's stand-in may have),
    named here so that the registry does not depend on the config that validates itself through it. The
    warpers' own fields (WARPERS) are read by name."""

    method: str
    repetition_penalty: float | None
    frequency_penalty: float | None
    presence_penalty: float | None
    no_repeat_ngram_size: int | None
    min_length: int
    temperature: float | None
    dynatemp_range: float | None
    dynatemp_exponent: float
    edt_theta: float | None
    edt_base: float
    bad_words_ids: list[list[int]] | None
    sequence_bias: list[list] | None
    forced_bos_token_id: int | None
    suppress_tokens: list[int] | None
    suppress_special: bool
    renormalize_logits: bool


def temperature_rule(cfg: ProcessorSettings) -> LogitsProcessor | None:
    """The temperature processor: dynamic (llama.cpp), entropy-based (EDT), plain, or none."""
    base = cfg.temperature if cfg.temperature is not None else 1.0
    if cfg.dynatemp_range is not None:
        return DynamicTemperature(base, cfg.dynatemp_range, cfg.dynatemp_exponent)
    if cfg.edt_theta is not None:
        return EntropyTemperature(base, cfg.edt_theta, cfg.edt_base)
    return Temperature(cfg.temperature) if cfg.temperature is not None else None


def suppressed(cfg: ProcessorSettings, ids: HasSpecialIds) -> list[int]:
    """The ids never emitted: seqlab's rule (`suppress_special`: pad, and the decoder start token unless it is
    EOS) and any listed in `suppress_tokens`."""
    rule = ([ids.pad_id, ids.bos_id] if ids.bos_id != ids.eos_id else [ids.pad_id]) if cfg.suppress_special else []
    return sorted({*rule, *(cfg.suppress_tokens or [])})


def build_processors(cfg: ProcessorSettings, ids: HasSpecialIds,
                     prefix: ForcedPrefix | None = None) -> list[LogitsProcessor]:
    """Processors in Hugging Face's order: penalties and constraints first, then the sampling warpers.
    `prefix`: the sources' forced target prefixes, after the other constraints (a forced token stays forced).

    Each processor checks its own value, so building them is also how a DecodingConfig is validated.
    """
    out: list[LogitsProcessor] = []
    if cfg.sequence_bias is not None:
        out.append(SequenceBias(cfg.sequence_bias))
    if cfg.repetition_penalty is not None:
        out.append(RepetitionPenalty(cfg.repetition_penalty))
    if cfg.frequency_penalty is not None or cfg.presence_penalty is not None:
        out.append(FrequencyPresencePenalty(cfg.frequency_penalty, cfg.presence_penalty))
    if cfg.no_repeat_ngram_size is not None:
        out.append(NoRepeatNGram(cfg.no_repeat_ngram_size))
    if cfg.bad_words_ids is not None:
        out.append(BadWords(cfg.bad_words_ids, ids.eos_id))
    if cfg.forced_bos_token_id is not None:
        out.append(ForcedFirstToken(cfg.forced_bos_token_id))
    banned = suppressed(cfg, ids)
    if banned:
        out.append(SuppressTokens(banned))
    if cfg.min_length:
        out.append(MinNewTokens(cfg.min_length, ids.eos_id))
    if prefix is not None:
        out.append(prefix)
    rule = temperature_rule(cfg)
    if rule is not None:
        out.append(rule)
    out.extend(cls(getattr(cfg, name)) for name, cls in WARPERS.items()  # contrastive's top_k counts candidates
               if name != "temperature" and getattr(cfg, name) is not None and cfg.method != "contrastive")
    if cfg.renormalize_logits:
        out.append(LogitNormalization())
    return out
