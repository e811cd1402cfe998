"""Hugging Face Marian (OPUS-MT) models <-> Seq2SeqTransformer.

Marian is the original Transformer with post-LN, sinusoidal positions (sines
then cosines), optionally scaled embeddings, shared/tied embeddings and a fixed
output bias (`final_logits_bias`). `from_hf` maps it onto the matching
ModelConfig variant and copies the weights, fusing q/k/v; `to_hf` goes back.
`transformers` is imported only here, and only when called.
"""

from __future__ import annotations

from typing import Any

import torch

from seqlab.config import ConfigError
from seqlab.model import ModelConfig, Seq2SeqTransformer

ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "silu", "silu": "silu"}


class InteropError(ValueError):
    """A model that has no exact counterpart on the other side; the message says what differs."""


def config_from_hf(hf_cfg: Any) -> ModelConfig:
    """The ModelConfig that computes exactly what a MarianConfig computes."""
    if hf_cfg.encoder_attention_heads != hf_cfg.decoder_attention_heads or \
            hf_cfg.encoder_ffn_dim != hf_cfg.decoder_ffn_dim:
        raise InteropError("encoder and decoder differ in heads or FFN size; seqlab uses one value for both")
    if hf_cfg.activation_function not in ACTIVATIONS:
        raise InteropError(f"activation {hf_cfg.activation_function!r} is not one of {sorted(ACTIVATIONS)}")
    shared = getattr(hf_cfg, "share_encoder_decoder_embeddings", True)
    tied = getattr(hf_cfg, "tie_word_embeddings", True)
    if shared and not tied:
        raise InteropError("shared encoder/decoder embeddings with an untied output layer have no seqlab variant")
    tgt_vocab = getattr(hf_cfg, "decoder_vocab_size", None) or hf_cfg.vocab_size
    try:
        return ModelConfig(
            src_vocab_size=hf_cfg.vocab_size,
            tgt_vocab_size=None if shared else tgt_vocab,
            d_model=hf_cfg.d_model, n_heads=hf_cfg.encoder_attention_heads,
            encoder_layers=hf_cfg.encoder_layers, decoder_layers=hf_cfg.decoder_layers,
            d_ff=hf_cfg.encoder_ffn_dim, dropout=float(hf_cfg.dropout),
            attention_dropout=float(hf_cfg.attention_dropout), activation_dropout=float(hf_cfg.activation_dropout),
            activation=ACTIVATIONS[hf_cfg.activation_function], max_positions=hf_cfg.max_position_embeddings,
            norm_position="post", positions="sinusoidal",
            tie_embeddings="all" if shared else ("decoder" if tied else "none"),
            scale_embedding=bool(hf_cfg.scale_embedding), layernorm_embedding=False, final_norm=False,
            output_bias=True, pad_id=hf_cfg.pad_token_id, bos_id=hf_cfg.decoder_start_token_id,
            eos_id=hf_cfg.eos_token_id if isinstance(hf_cfg.eos_token_id, int) else hf_cfg.eos_token_id[0],
        )
    except ConfigError as err:
        raise InteropError(f"Marian config has no seqlab variant: {err}") from None


def _attention_pairs(prefix_ours: str, prefix_hf: str, cross: bool) -> list[tuple[str, list[str]]]:
    """(our parameter, HF parameters fused into it in order) for one attention block."""
    pairs = []
    for kind in ("weight", "bias"):
        if cross:
            pairs.append((f"{prefix_ours}.q_proj.{kind}", [f"{prefix_hf}.q_proj.{kind}"]))
            pairs.append((f"{prefix_ours}.kv_proj.{kind}", [f"{prefix_hf}.{p}_proj.{kind}" for p in "kv"]))
        else:
            pairs.append((f"{prefix_ours}.qkv_proj.{kind}", [f"{prefix_hf}.{p}_proj.{kind}" for p in "qkv"]))
        pairs.append((f"{prefix_ours}.out_proj.{kind}", [f"{prefix_hf}.out_proj.{kind}"]))
    return pairs


def weight_map(cfg: ModelConfig) -> list[tuple[str, list[str]]]:
    """Every seqlab parameter and the Marian parameters it is made of."""
    pairs: list[tuple[str, list[str]]] = []
    layers = [("encoder_layers", "model.encoder.layers", cfg.encoder_layers, False),
              ("decoder_layers", "model.decoder.layers", cfg.decoder_layers, True)]
    for ours, theirs, count, is_decoder in layers:
        for i in range(count):
            o, t = f"{ours}.{i}", f"{theirs}.{i}"
            pairs += _attention_pairs(f"{o}.self_attn", f"{t}.self_attn", cross=False)
            norms = [("self_attn_res", "self_attn_layer_norm"), ("ffn_res", "final_layer_norm")]
            if is_decoder:
                pairs += _attention_pairs(f"{o}.cross_attn", f"{t}.encoder_attn", cross=True)
                norms.append(("cross_attn_res", "encoder_attn_layer_norm"))
            for fc in ("fc1", "fc2"):
                pairs += [(f"{o}.ffn.{fc}.{k}", [f"{t}.{fc}.{k}"]) for k in ("weight", "bias")]
            pairs += [(f"{o}.{a}.norm.{k}", [f"{t}.{b}.{k}"]) for a, b in norms for k in ("weight", "bias")]
    pairs.append(("src_embed.tokens.weight", ["model.encoder.embed_tokens.weight"]))
    if cfg.tie_embeddings != "all":
        pairs.append(("tgt_embed.tokens.weight", ["model.decoder.embed_tokens.weight"]))
    if cfg.tie_embeddings == "none":
        pairs.append(("output.weight", ["lm_head.weight"]))
    return pairs


def from_hf(hf_model: Any) -> Seq2SeqTransformer:
    """A Seq2SeqTransformer that computes the same logits as a MarianMTModel (eval mode)."""
    cfg = config_from_hf(hf_model.config)
    model = Seq2SeqTransformer(cfg)
    theirs = hf_model.state_dict()
    ours = {name: torch.cat([theirs[n] for n in parts], dim=0) for name, parts in weight_map(cfg)}
    ours["output.bias"] = theirs["final_logits_bias"].reshape(-1)
    for side in ("encoder", "decoder"):
        table = theirs.get(f"model.{side}.embed_positions.weight")
        if table is not None and not torch.allclose(table.float(), model.src_embed.positions.table, atol=1e-4):
            raise InteropError(f"the {side}'s position table is not the sinusoid Marian defines; "
                               "seqlab keeps positions fixed and cannot load trained ones")
    missing, unexpected = model.load_state_dict(ours, strict=False)
    tied = {"tgt_embed.tokens.weight", "output.weight"}
    if unexpected or set(missing) - tied:
        raise InteropError(f"weights did not map: missing {missing}, unexpected {unexpected}")
    return model.eval()


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
    activation = {"silu": "swish"}.get(cfg.activation, cfg.activation)
    hf_cfg = MarianConfig(
        vocab_size=cfg.src_vocab_size, decoder_vocab_size=cfg.target_vocab_size, d_model=cfg.d_model,
        encoder_layers=cfg.encoder_layers, decoder_layers=cfg.decoder_layers,
        encoder_attention_heads=cfg.n_heads, decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff, activation_function=activation,
        dropout=cfg.dropout, attention_dropout=cfg.attention_dropout, activation_dropout=cfg.activation_dropout,
        max_position_embeddings=cfg.max_positions, scale_embedding=cfg.scale_embedding,
        pad_token_id=cfg.pad_id, decoder_start_token_id=cfg.bos_id, eos_token_id=cfg.eos_id,
        forced_eos_token_id=None, share_encoder_decoder_embeddings=cfg.tie_embeddings == "all",
        tie_word_embeddings=cfg.tie_embeddings != "none",
    )
    hf = MarianMTModel(hf_cfg).eval()
    ours = model.state_dict()
    state = {}
    for name, parts in weight_map(cfg):
        for part, chunk in zip(parts, ours[name].split(ours[name].shape[0] // len(parts), dim=0), strict=True):
            state[part] = chunk
    if cfg.tie_embeddings == "all":
        state["model.shared.weight"] = ours["src_embed.tokens.weight"]
    bias = ours.get("output.bias")
    state["final_logits_bias"] = (bias if bias is not None else torch.zeros(cfg.target_vocab_size))[None, :]
    hf.load_state_dict(state, strict=False)
    return hf
