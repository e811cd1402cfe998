"""Every Hugging Face family seqlab imports and exports, encoder-decoder (interop.families) and decoder-only
(interop.causal_families), and the one way from a config.json to its family and ModelConfig."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from seqlab.config import ConfigError
from seqlab.interop.causal_families import CAUSAL_FAMILIES
from seqlab.interop.families import ENCODER_DECODER, Family, InteropError
from seqlab.interop.gemma_families import GEMMA_FAMILIES
from seqlab.model import ModelConfig

FAMILIES: dict[str, Family] = {**ENCODER_DECODER, "mt5": ENCODER_DECODER["t5"], **CAUSAL_FAMILIES, **GEMMA_FAMILIES}
# mT5 is T5 v1.1's code with another vocabulary
UNSUPPORTED = {"led": "Longformer's sliding-window attention", "longt5": "local/transient-global attention",
               "prophetnet": "n-stream self-attention", "xlm-prophetnet": "n-stream self-attention",
               "bigbird_pegasus": "block-sparse attention", "switch_transformers": "mixture-of-experts layers",
               "umt5": "a relative bias in every layer", "fsmt": "separate source and target vocabularies with "
               "fairseq's own layout", "blenderbot": "its own layer layout", "plbart": "its own tokenizer layout",
               "mixtral": "mixture-of-experts layers", "qwen2_moe": "mixture-of-experts layers",
               "gpt_neox": "parallel attention and feed-forward blocks", "phi": "parallel blocks and partial RoPE"}


def family_of(c: Mapping[str, Any], where: str = "config.json") -> Family:
    """The family of a config.json, or a refusal that says what to do."""
    kind = c.get("model_type")
    if kind in FAMILIES:
        return FAMILIES[kind]
    if kind in UNSUPPORTED:
        raise InteropError(f"{where}: model_type={kind!r} has {UNSUPPORTED[kind]}, which seqlab's Transformer does "
                           f"not compute; seqlab imports {sorted(FAMILIES)}")
    raise InteropError(f"{where}: model_type={kind!r} is not a family seqlab imports; it imports {sorted(FAMILIES)}")


def model_config(c: Mapping[str, Any], where: str = "config.json") -> ModelConfig:
    """The ModelConfig that computes what the config.json's model computes."""
    family = family_of(c, where)
    try:
        return ModelConfig(**family.config(c, family.choices))
    except KeyError as err:
        raise InteropError(f"{where}: no {err.args[0]!r}, which a {family.name} config.json has") from None
    except (ConfigError, TypeError, ValueError) as err:
        if isinstance(err, InteropError):
            raise
        raise InteropError(f"{where}: the {family.name} config has no seqlab variant ({type(err).__name__}: "
                           f"{err})") from None
