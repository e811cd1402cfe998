"""A Seq2SeqTransformer in a family's shape as that family's transformers model: the inverse of
interop.hf.from_state, through the same tables (interop.families). An imported model goes back to its own
family; a model trained from scratch with a family's choices (BART's post-LN with an embedding LayerNorm and
learned positions offset by 2, T5's RMSNorm without biases, ...) exports to that family.
`transformers` is imported only when called.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from seqlab.interop.families import ACTIVATIONS, FAMILIES, Family, InteropError
from seqlab.io import atomic_write
from seqlab.model import ModelConfig, Seq2SeqTransformer

# mT5 exports as T5: the same code
ARCHITECTURES = {"marian": "MarianMTModel", "bart": "BartForConditionalGeneration",
                 "mbart": "MBartForConditionalGeneration", "pegasus": "PegasusForConditionalGeneration",
                 "m2m_100": "M2M100ForConditionalGeneration", "t5": "T5ForConditionalGeneration"}
HF_ACTIVATION = {ours: theirs for theirs, ours in reversed(list(ACTIVATIONS.items()))}  # first name wins
EXPORT_ORDER = ("bart", "mbart", "pegasus", "m2m_100", "t5", "marian")  # Marian last: seqlab's own models


def mismatches(cfg: ModelConfig, family: Family) -> list[str]:
    """What in `cfg` the family's config cannot express, each named by its key; empty: the family fits."""
    out = []
    for key, value in family.choices.items():
        actual = cfg.use_final_norm if key == "final_norm" else getattr(cfg, key)
        if key == "output_bias" and value and not actual:  # the family's bias, written as zeros
            continue
        if actual != value:
            out.append(f"model.{key}={actual} ({family.name} has {value})")
    if family.name == "t5":
        return out + [why for bad, why in (
            (cfg.activation not in ("relu", "gelu_tanh", "gelu", "silu"), f"model.activation={cfg.activation}"),
            (not cfg.shared_vocab, "separate source and target vocabularies")) if bad]
    defaults = dict(norm="layernorm", bias=True, scale_attention=True, d_head=None, gated_ffn=False,
                    rescale_output=False, copy_attention=False)
    out += [f"model.{k}={getattr(cfg, k)} (must be {v})" for k, v in defaults.items() if getattr(cfg, k) != v]
    if family.name == "m2m_100":
        return out + ([f"model.position_offset={cfg.position_offset} (must be pad_id + 1)"]
                      if cfg.position_offset != cfg.pad_id + 1 else []) + \
            (["separate source and target vocabularies"] if not cfg.shared_vocab else [])
    if cfg.sinusoid_layout != "marian":
        out.append(f"model.sinusoid_layout={cfg.sinusoid_layout} (must be marian)")
    if family.name == "marian":
        return out + [why for bad, why in (
            (cfg.position_offset != 0, f"model.position_offset={cfg.position_offset} (must be 0)"),
            (cfg.tie_embeddings == "inputs", "model.tie_embeddings=inputs (Marian ties the output layer too)"))
            if bad]
    return out + (["separate source and target vocabularies"] if not cfg.shared_vocab else [])


def matches(cfg: ModelConfig, family: Family) -> bool:
    """Whether `cfg` is a variant the family's config can express."""
    return not mismatches(cfg, family)


def family_for(cfg: ModelConfig, hint: str | None = None) -> Family:
    """The family to export to: the one the model was imported from (`hint`) if it still fits, else the first
    whose choices it has; refuses, naming what no family has."""
    names = ([hint] if hint in FAMILIES else []) + list(EXPORT_ORDER)
    for name in names:
        if matches(cfg, FAMILIES[name]):
            return FAMILIES[name]
    raise InteropError(f"no Hugging Face family has this variant (norm={cfg.norm}, norm_position="
                       f"{cfg.norm_position}, positions={cfg.positions}, bias={cfg.bias}, gated_ffn={cfg.gated_ffn}, "
                       f"copy_attention={cfg.copy_attention}); export it with --format ctranslate2 or keep it in "
                       "seqlab")


def hf_config(cfg: ModelConfig, family: Family) -> dict[str, Any]:
    """config.json's values for `cfg` in `family` (the inverse of the family's `config`)."""
    ids = dict(pad_token_id=cfg.pad_id, eos_token_id=cfg.eos_id, decoder_start_token_id=cfg.bos_id)
    if family.name == "t5":
        act = HF_ACTIVATION[cfg.activation] if cfg.activation != "gelu_tanh" or not cfg.gated_ffn else "gelu"
        return dict(vocab_size=cfg.src_vocab_size, d_model=cfg.d_model, d_kv=cfg.head_dim, d_ff=cfg.d_ff,
                    num_layers=cfg.encoder_layers, num_decoder_layers=cfg.decoder_layers, num_heads=cfg.n_heads,
                    relative_attention_num_buckets=cfg.relative_buckets,
                    relative_attention_max_distance=cfg.relative_max_distance, dropout_rate=cfg.dropout,
                    layer_norm_epsilon=cfg.layer_norm_eps, feed_forward_proj=("gated-" if cfg.gated_ffn else "") + act,
                    tie_word_embeddings=cfg.rescale_output, **ids)
    out = dict(vocab_size=cfg.src_vocab_size, d_model=cfg.d_model, encoder_layers=cfg.encoder_layers,
               decoder_layers=cfg.decoder_layers, encoder_attention_heads=cfg.n_heads,
               decoder_attention_heads=cfg.n_heads, encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff,
               dropout=cfg.dropout, attention_dropout=cfg.attention_dropout,
               activation_dropout=cfg.activation_dropout, activation_function=HF_ACTIVATION[cfg.activation],
               max_position_embeddings=cfg.max_positions, scale_embedding=cfg.scale_embedding,
               forced_eos_token_id=None, tie_word_embeddings=cfg.tie_embeddings != "inputs", **ids)
    if family.name == "marian":
        out.update(decoder_vocab_size=cfg.target_vocab_size, tie_word_embeddings=cfg.tie_embeddings != "none",
                   share_encoder_decoder_embeddings=cfg.tie_embeddings == "all")
    return out


def hf_state(model: Seq2SeqTransformer, family: Family) -> dict[str, torch.Tensor]:
    """The family's state dict: every fused seqlab tensor split back into the family's parameters."""
    ours, state = model.state_dict(), {}
    for name, parts in family.weights(model.cfg):
        names = [p.split("|")[0] for p in parts]  # a tied table under its first (shared) name
        for part, chunk in zip(names, ours[name].chunk(len(names), dim=0), strict=True):
            state[part] = chunk.clone()
    if "final_logits_bias" in state:
        state["final_logits_bias"] = state["final_logits_bias"].reshape(1, -1)
    elif family.name != "t5" and family.name != "m2m_100":  # a family with an output bias, a model without one
        state["final_logits_bias"] = torch.zeros(1, model.cfg.target_vocab_size)
    return state


def write_family(model: Seq2SeqTransformer, out: Path, hint: str | None = None) -> Family:
    """config.json and model.safetensors of `model` as its family saves them (tied tables under their shared
    name, an untied head as lm_head), so that `from_pretrained` ties and unties exactly as for the family's own
    checkpoints. Returns the family."""
    from transformers import AutoConfig

    family = family_for(model.cfg, hint)
    config = AutoConfig.for_model(family.name, **hf_config(model.cfg, family))
    config.architectures = [ARCHITECTURES[family.name]]
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    state = {k: v.contiguous() for k, v in hf_state(model, family).items()}
    atomic_write(out / "model.safetensors", lambda f: f.write(save(state)))
    return family


def save(state: dict[str, torch.Tensor]) -> bytes:
    from safetensors.torch import save

    return save(state, metadata={"format": "pt"})
