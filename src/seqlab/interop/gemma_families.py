"""Gemma 2 and Gemma 3 (text) as seqlab variants, declared as the other decoder-only families are
(interop.causal_families): ModelConfig choices, config.json read both ways, one weight table.

What Gemma computes beyond Llama, each a ModelConfig field: the embedding scaled by sqrt(d) (`scale_embedding`),
RMSNorm as x * (1 + w) (the weights stored as w, read as seqlab's gain 1 + w: `PLUS_ONE`), GeGLU (the tanh GELU
gated), a norm on each sublayer's output before its residual add (`sandwich_norm`), the logits' scale
`query_pre_attn_scalar ** -0.5` (`attention_scalar`), local sliding-window layers between global ones
(`sliding_window`, `sliding_layers` from `layer_types`); Gemma 2's soft caps on the attention logits and the
output (`attn_softcap`, `logit_softcap`); Gemma 3's q/k norms (`qk_norm`) and the local layers' own RoPE base
(`local_rope_base`). A RoPE scaling other than the default (Gemma 3's larger models scale the global layers
linearly) is refused by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from seqlab.interop.causal_families import CAUSAL, head_pairs, windows
from seqlab.interop.families import (
    ACTIVATIONS,
    HF_ACTIVATION,
    PLUS_ONE,
    Family,
    InteropError,
    WeightMap,
    end_ids,
    eos_value,
)
from seqlab.model import ModelConfig

GEMMA = dict(CAUSAL, norm="rmsnorm", positions="rope", gated_ffn=True, scale_embedding=True, sandwich_norm=True,
             tie_embeddings="all")


def rope_bases(c: Mapping[str, Any]) -> tuple[float, float | None]:
    """(the global layers' RoPE base, the sliding layers' own or None): transformers 5 keeps them per layer
    type in `rope_parameters`, transformers 4 as `rope_theta` and `rope_local_base_freq`."""
    params = dict(c.get("rope_parameters") or {})
    per_type = {k: dict(v) for k, v in params.items() if isinstance(v, Mapping)}
    full, local = per_type.get("full_attention", params), per_type.get("sliding_attention")
    for kind in (full, local, c.get("rope_scaling") or {}):
        rope = (kind or {}).get("rope_type", (kind or {}).get("type", "default"))
        if rope not in (None, "default"):
            raise InteropError(f"config.json: rope_scaling type {rope!r} is not computed by seqlab (its RoPE is the "
                               "default, unscaled one)")
    base = float(full.get("rope_theta", c.get("rope_theta", 10000.0)))
    local_base = local.get("rope_theta") if local else c.get("rope_local_base_freq")
    return base, None if local_base is None or float(local_base) == base else float(local_base)


def gemma_config(c: Mapping[str, Any], choices: Mapping[str, Any]) -> dict[str, Any]:
    """Gemma 2 and Gemma 3's text model (`gemma3_text`)."""
    act = c.get("hidden_activation") or c.get("hidden_act") or "gelu_pytorch_tanh"
    if act not in ACTIVATIONS:
        raise InteropError(f"config.json: hidden_activation={act!r} has no exact seqlab activation")
    if c.get("use_bidirectional_attention"):
        raise InteropError("config.json: use_bidirectional_attention=true (an encoder's Gemma) is not a causal LM")
    if c.get("attention_bias"):
        raise InteropError("config.json: attention_bias=true: Gemma's projections have no biases in seqlab's table")
    heads, d = int(c["num_attention_heads"]), int(c["hidden_size"])
    head_dim = int(c.get("head_dim") or d // heads)
    kv = int(c.get("num_key_value_heads") or heads)
    base, local = rope_bases(c)
    ends = end_ids(c.get("eos_token_id") if c.get("eos_token_id") is not None else 1)
    pad = c.get("pad_token_id")
    return dict(src_vocab_size=int(c["vocab_size"]), d_model=d, n_heads=heads,
                decoder_layers=int(c["num_hidden_layers"]), d_ff=int(c["intermediate_size"]),
                d_head=head_dim if head_dim * heads != d else None,
                kv_heads=kv if kv != heads else None, activation=ACTIVATIONS[act], bias=False,
                max_positions=int(c.get("max_position_embeddings", 8192)), rope_base=base, local_rope_base=local,
                layer_norm_eps=float(c.get("rms_norm_eps", 1e-6)),
                attention_dropout=float(c.get("attention_dropout") or 0.0), dropout=0.0,
                attention_scalar=float(c.get("query_pre_attn_scalar") or head_dim),
                attn_softcap=c.get("attn_logit_softcapping"), logit_softcap=c.get("final_logit_softcapping"),
                pad_id=ends["eos_id"] if pad is None else int(pad),
                bos_id=int(c.get("bos_token_id") if c.get("bos_token_id") is not None else ends["eos_id"]),
                **ends, **windows(c), **choices)


def gemma_export(cfg: ModelConfig) -> dict[str, Any]:
    sliding = set(range(cfg.decoder_layers) if cfg.sliding_layers is None else cfg.sliding_layers) \
        if cfg.sliding_window is not None else set()
    out = dict(vocab_size=cfg.src_vocab_size, hidden_size=cfg.d_model, num_attention_heads=cfg.n_heads,
               num_hidden_layers=cfg.decoder_layers, intermediate_size=cfg.d_ff, head_dim=cfg.head_dim,
               num_key_value_heads=cfg.key_value_heads, hidden_activation=HF_ACTIVATION[cfg.activation],
               max_position_embeddings=cfg.max_positions, rms_norm_eps=cfg.layer_norm_eps,
               attention_dropout=cfg.attention_dropout, attention_bias=False,
               query_pre_attn_scalar=integral(cfg.attention_scalar), sliding_window=cfg.sliding_window,
               layer_types=["sliding_attention" if i in sliding else "full_attention"
                            for i in range(cfg.decoder_layers)],
               tie_word_embeddings=True, bos_token_id=cfg.bos_id, eos_token_id=eos_value(cfg), pad_token_id=cfg.pad_id)
    full = {"rope_type": "default", "rope_theta": cfg.rotary_base}
    if cfg.qk_norm:  # Gemma 3
        local = {"rope_type": "default", "rope_theta": cfg.local_rope_base or cfg.rotary_base}
        return {**out, "rope_parameters": {"full_attention": full, "sliding_attention": local},
                "final_logit_softcapping": cfg.logit_softcap, "attn_logit_softcapping": cfg.attn_softcap}
    return {**out, "rope_parameters": full, "final_logit_softcapping": cfg.logit_softcap,
            "attn_logit_softcapping": cfg.attn_softcap}


def integral(value: float | None) -> float | int | None:
    """config.json's integer fields as integers (transformers' config classes check the type)."""
    return int(value) if value is not None and float(value).is_integer() else value


def gain(ours: str, theirs: str) -> WeightMap:
    """A Gemma RMSNorm: seqlab's gain g = 1 + its stored w."""
    return [(f"{ours}.weight", [f"{theirs}.weight{PLUS_ONE}"])]


def gemma_weights(cfg: ModelConfig) -> WeightMap:
    """seqlab's parameters from Gemma's names (model.layers.N.self_attn.q_proj.weight, the four norms, ...)."""
    pairs: WeightMap = []
    for i in range(cfg.decoder_layers):
        o, t = f"decoder_layers.{i}", f"model.layers.{i}"
        pairs += [(f"{o}.self_attn.qkv_proj.weight", [f"{t}.self_attn.{p}_proj.weight" for p in "qkv"]),
                  (f"{o}.self_attn.out_proj.weight", [f"{t}.self_attn.o_proj.weight"]),
                  (f"{o}.ffn.fc1.weight", [f"{t}.mlp.gate_proj.weight", f"{t}.mlp.up_proj.weight"]),
                  (f"{o}.ffn.fc2.weight", [f"{t}.mlp.down_proj.weight"])]
        pairs += gain(f"{o}.self_attn_res.norm", f"{t}.input_layernorm")
        pairs += gain(f"{o}.self_attn_res.post_norm", f"{t}.post_attention_layernorm")
        pairs += gain(f"{o}.ffn_res.norm", f"{t}.pre_feedforward_layernorm")
        pairs += gain(f"{o}.ffn_res.post_norm", f"{t}.post_feedforward_layernorm")
        if cfg.qk_norm:
            pairs += gain(f"{o}.self_attn.q_norm", f"{t}.self_attn.q_norm")
            pairs += gain(f"{o}.self_attn.k_norm", f"{t}.self_attn.k_norm")
    pairs += gain("decoder_norm", "model.norm")
    return pairs + head_pairs(cfg, "model.embed_tokens.weight")


GEMMA_FAMILIES: dict[str, Family] = {
    "gemma2": Family("gemma2", GEMMA, gemma_config, gemma_weights, gemma_export, "Gemma2ForCausalLM"),
    "gemma3_text": Family("gemma3_text", dict(GEMMA, qk_norm=True), gemma_config, gemma_weights, gemma_export,
                          "Gemma3ForCausalLM"),
}
