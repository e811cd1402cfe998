"""Hugging Face encoder-decoder models <-> Seq2SeqTransformer.

`from_state` builds the seqlab model of any family interop.families knows from a config.json and a state
dict, fusing q/k/v; `from_hf` does it from a loaded transformers model. `to_hf` writes a Marian model.
`transformers` is imported only here, and only when called.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from seqlab.interop.families import FAMILIES, Family, InteropError, family_of, model_config, seqlab_state
from seqlab.interop.hf_export import hf_config, hf_state
from seqlab.model import ModelConfig, Seq2SeqTransformer

__all__ = ["InteropError", "from_hf", "from_state", "to_hf"]


def untie_where_saved(cfg: ModelConfig, state: dict[str, Tensor], family: Family) -> ModelConfig:
    """Tying as the weights have it: transformers keeps a saved `lm_head.weight` that differs from the table
    it would be tied to (Flan-T5's head), so seqlab unties it too."""
    head = state.get("lm_head.weight")
    if head is None or cfg.tie_embeddings not in ("all", "decoder"):
        return cfg
    table = dict(family.weights(cfg))["src_embed.tokens.weight" if cfg.tie_embeddings == "all"
                                      else "tgt_embed.tokens.weight"][0]
    names = [n for n in table.split("|") if n != "lm_head.weight"]
    tied_to = next((state[n] for n in names if n in state), None)
    if tied_to is None or torch.equal(tied_to, head):
        return cfg
    return replace(cfg, tie_embeddings="inputs" if cfg.tie_embeddings == "all" else "none")


def from_state(config: dict[str, Any], state: dict[str, Tensor], where: str = "the model") -> Seq2SeqTransformer:
    """A Seq2SeqTransformer (eval mode) computing what a Hugging Face model of this config.json and state dict
    computes."""
    family = family_of(config, where)
    cfg = untie_where_saved(model_config(config, where), state, family)
    model = Seq2SeqTransformer(cfg)
    ours = seqlab_state(cfg, family, state, where)
    if cfg.positions == "sinusoidal":
        check_sinusoids(model, state, where)
    missing, unexpected = model.load_state_dict(ours, strict=False)
    tied = {"tgt_embed.tokens.weight", "output.weight"}
    if unexpected or set(missing) - tied:
        raise InteropError(f"{where}: weights did not map: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return model.eval()


def check_sinusoids(model: Seq2SeqTransformer, state: dict[str, Tensor], where: str) -> None:
    """A saved sinusoid table (Marian and PEGASUS keep theirs in the weights) must be the one seqlab computes:
    seqlab keeps positions fixed and cannot load trained ones."""
    ours = model.src_embed.positions.table
    for side in ("encoder", "decoder"):
        table = state.get(f"model.{side}.embed_positions.weight")
        if table is not None and not (table.shape[0] <= ours.shape[0]
                                      and torch.allclose(table.float(), ours[: table.shape[0]], atol=1e-4)):
            raise InteropError(f"{where}: the {side}'s position table is not the sinusoid its family defines; "
                               "seqlab keeps positions fixed and cannot load trained ones")


def from_hf(hf_model: Any) -> Seq2SeqTransformer:
    """A Seq2SeqTransformer that computes the same logits as a transformers encoder-decoder (eval mode)."""
    return from_state(hf_model.config.to_dict(), hf_model.state_dict(), type(hf_model).__name__)


def to_hf(model: Seq2SeqTransformer) -> Any:
    """A MarianMTModel that computes the same logits as `model` (post-LN, sinusoidal variants only)."""
    from transformers import MarianConfig, MarianMTModel

    cfg = model.cfg
    problems = [msg for bad, msg in [
        (cfg.norm_position != "post", f"model.norm_position={cfg.norm_position} (Marian is post-LN)"),
        (cfg.positions != "sinusoidal", f"model.positions={cfg.positions} (Marian adds sinusoidal positions to "
                                        "the embeddings and has no relative positions)"),
        (cfg.layernorm_embedding, "model.layernorm_embedding must be off"),
        (cfg.use_final_norm, "model.final_norm must be off"),
        (cfg.copy_attention, "model.copy_attention must be off"),
        (cfg.norm != "layernorm", f"model.norm={cfg.norm} (Marian uses LayerNorm)"),
        (cfg.gated_ffn or not cfg.bias or not cfg.scale_attention or cfg.d_head is not None or cfg.rescale_output,
         "model.gated_ffn, bias, scale_attention, d_head and rescale_output must keep their defaults"),
        (cfg.position_offset or cfg.sinusoid_layout != "marian", "model.position_offset must be 0 and "
                                                                 "model.sinusoid_layout marian"),
        (cfg.tie_embeddings == "inputs", "model.tie_embeddings=inputs (Marian ties the output layer too)"),
        (cfg.activation == "gelu_tanh", "model.activation=gelu_tanh (Marian's GELU is the exact one)"),
    ] if bad]
    if problems:
        raise InteropError("Marian cannot express this variant: " + "; ".join(problems))
    marian = FAMILIES["marian"]  # the config and weights as `seqlab export` writes them (interop.hf_export)
    hf = MarianMTModel(MarianConfig(**hf_config(cfg, marian))).eval()
    hf.load_state_dict(hf_state(model, marian), strict=False)
    return hf
