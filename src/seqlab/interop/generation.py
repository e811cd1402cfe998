"""Hugging Face's `GenerationConfig` both ways: the DecodingConfig a folder's `generation_config.json` means
(import) and the `generation_config.json` a DecodingConfig writes (export).

What `generate` can take of each option is declared with it (decoding.options, consumer `hf`); anything else is
refused by name on export.
"""

from __future__ import annotations

from typing import Any

from seqlab.config import ConfigError
from seqlab.decoding import DecodingConfig
from seqlab.decoding.methods import METHODS, mapping, method_of
from seqlab.decoding.options import refusals
from seqlab.decoding.registry import suppressed
from seqlab.model import ModelConfig

# What Hugging Face `generate` uses for a GenerationConfig value left unset (transformers 5 leaves them None).
HF_GENERATION_DEFAULTS: dict[str, Any] = {
    "max_length": 20, "min_length": 0, "do_sample": False, "early_stopping": False, "num_beams": 1,
    "temperature": 1.0, "top_k": 50, "top_p": 1.0, "typical_p": 1.0, "repetition_penalty": 1.0,
    "length_penalty": 1.0, "no_repeat_ngram_size": 0, "num_return_sequences": 1, "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
}
NEW_TOKENS_BY_DEFAULT = 20  # transformers 5, for a config with neither max_length nor max_new_tokens


def sequence_bias_pairs(value: Any) -> list[list] | None:
    """Hugging Face's `sequence_bias` ({(ids...): bias} or [[ids, bias], ...]) as seqlab's [[ids], bias] pairs."""
    if not value:
        return None
    items = value.items() if isinstance(value, dict) else value
    return [[list(ids), float(bias)] for ids, bias in items]


def decoding_of(gc: Any) -> DecodingConfig:
    """The DecodingConfig equal to a Hugging Face `GenerationConfig` (or its dict) for an encoder-decoder.

    HF's `max_length`/`min_length` count the decoder start token, seqlab's lengths do not;
    HF applies `top_k=50` by default when sampling, so the mapping keeps it.
    """
    given = dict(gc) if isinstance(gc, dict) else gc.to_dict()
    g = {**HF_GENERATION_DEFAULTS, **{k: v for k, v in given.items() if v is not None}}  # None = HF's default
    sample = bool(g.get("do_sample"))
    beams = int(g.get("num_beams") or 1)
    # HF's rule: contrastive search when penalty_alpha > 0 and top_k > 1, without sampling or beams
    contrastive = not sample and beams == 1 and (g.get("penalty_alpha") or 0) > 0 and int(g["top_k"] or 0) > 1
    method = "sample" if sample else ("beam" if beams > 1 else ("contrastive" if contrastive else "greedy"))
    # transformers 5 generates max_length - 1 new tokens (max_length counts the decoder start), and 20 new
    # tokens when neither max_length nor max_new_tokens is given
    if g.get("max_new_tokens"):
        max_length = int(g["max_new_tokens"])
    elif given.get("max_length"):
        max_length = int(given["max_length"]) - 1
    else:
        max_length = NEW_TOKENS_BY_DEFAULT
    min_length = g.get("min_new_tokens") or max(0, int(g.get("min_length") or 0) - 1)
    bad = g.get("bad_words_ids")

    def warper(key: str, off: float | None) -> Any:
        value = g.get(key)
        return None if not sample or value is None or value == off else value

    return DecodingConfig(
        method=method, num_beams=beams if METHODS[method].beams else 1,
        n_best=int(g.get("num_return_sequences") or 1),
        num_beam_groups=int(g.get("num_beam_groups") or 1) if METHODS[method].beams else 1,
        diversity_penalty=float(g.get("diversity_penalty") or 0.0) if METHODS[method].beams else 0.0,
        length_penalty=float(g.get("length_penalty", 1.0)),
        early_stopping=g.get("early_stopping", False) if g.get("early_stopping") != "never" else "never",
        min_length=min_length, max_length=max_length,
        no_repeat_ngram_size=g.get("no_repeat_ngram_size") or None,
        repetition_penalty=None if g.get("repetition_penalty", 1.0) == 1.0 else g["repetition_penalty"],
        temperature=warper("temperature", 1.0), top_k=int(g["top_k"]) if contrastive else warper("top_k", 0),
        top_p=warper("top_p", 1.0),
        min_p=warper("min_p", None), typical_p=warper("typical_p", 1.0), epsilon=warper("epsilon_cutoff", 0.0),
        penalty_alpha=float(g["penalty_alpha"]) if contrastive else None,
        eta=warper("eta_cutoff", 0.0), force_eos=g.get("forced_eos_token_id") is not None,
        bad_words_ids=[list(b) for b in bad] if bad else None,
        sequence_bias=sequence_bias_pairs(g.get("sequence_bias")),
        suppress_tokens=list(g["suppress_tokens"]) if g.get("suppress_tokens") else None,
        forced_bos_token_id=g.get("forced_bos_token_id"), suppress_special=False,
        renormalize_logits=bool(g.get("renormalize_logits", False)),
    )


def generation_config(cfg: DecodingConfig, model: ModelConfig) -> dict[str, Any]:
    """Hugging Face `GenerationConfig` values equal to `cfg` for an encoder-decoder.

    What `generate` can take of each option is declared with it (decoding.options, consumer `hf`); anything
    else is refused by name. HF's lengths count the decoder start token; without `max_length` (and with
    fairseq's per-source limit at its default) the model's position limit is written.
    """
    problems = refusals(cfg, "hf")
    if problems:
        raise ConfigError("; ".join(problems))
    sample = method_of(cfg).samples
    out: dict[str, Any] = {
        "decoder_start_token_id": model.bos_id, "pad_token_id": model.pad_id,
        "eos_token_id": list(model.end_ids) if model.extra_eos_ids else model.eos_id,
        "suppress_tokens": suppressed(cfg, model) or None, "bad_words_ids": cfg.bad_words_ids,
        "sequence_bias": cfg.sequence_bias,
        "forced_bos_token_id": cfg.forced_bos_token_id, "renormalize_logits": cfg.renormalize_logits,
        "do_sample": sample, "num_beams": cfg.num_beams, "num_return_sequences": cfg.n_best,
        "max_new_tokens": cfg.max_length or model.max_positions - 1, "min_new_tokens": cfg.min_length or None,
        "no_repeat_ngram_size": cfg.no_repeat_ngram_size or 0, "repetition_penalty": cfg.repetition_penalty or 1.0,
        "forced_eos_token_id": model.eos_id if cfg.force_eos else None,
    }
    return {**out, **mapping(cfg, "hf")}  # the method's own fields (HF refuses beam options without beams)
