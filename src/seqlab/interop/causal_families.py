"""The Hugging Face decoder-only families as seqlab variants (model.architecture=decoder_only, model.start=prompt:
a causal LM continues its prompt), declared as the encoder-decoder families are (interop.families): ModelConfig
choices, config.json read both ways, one weight table.

- gpt2: pre-LN, learned positions, GELU-tanh (`gelu_new`), biases everywhere, a tied head; its projections are
  `Conv1D`s, stored (in, out) and transposed both ways;
- llama (Llama, TinyLlama, SmolLM, and Mistral by the same code): pre-RMSNorm, RoPE (rotate-half, `rope_theta`),
  SwiGLU, grouped-query attention, no biases (or `attention_bias` with `mlp_bias`), heads of `head_dim`;
- qwen2: Llama's layout with biases on q, k and v alone, a tied or untied head.

Sliding-window attention (Mistral's `sliding_window`, Qwen2's `use_sliding_window` over its sliding layers) is
computed as transformers masks it. What seqlab does not compute is refused by name: a rope scaling other than
the default, mixture-of-experts layers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from seqlab.interop.families import (
    ACTIVATIONS,
    HF_ACTIVATION,
    TRANSPOSED,
    Family,
    InteropError,
    WeightMap,
    activation,
    end_ids,
    eos_value,
    first_id,
    norm_pairs,
)
from seqlab.model import ModelConfig

CAUSAL = dict(architecture="decoder_only", start="prompt", encoder_layers=0, norm_position="pre", final_norm=True,
              scale_embedding=False)


def special(c: Mapping[str, Any]) -> dict[str, int]:
    """pad, bos, eos: a family without a pad token pads with EOS (as `generate` does); an EOS list's first,
    its others ending rows as well (Llama 3.x-Instruct's config.json lists three)."""
    ends = end_ids(c.get("eos_token_id") if c.get("eos_token_id") is not None else 0)
    eos, bos, pad = ends["eos_id"], c.get("bos_token_id"), c.get("pad_token_id")
    return dict(pad_id=eos if pad is None else int(pad), bos_id=eos if bos is None else first_id(bos), **ends)


def gpt2_config(c: Mapping[str, Any], choices: Mapping[str, Any]) -> dict[str, Any]:
    for key, ok in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                    ("add_cross_attention", False)):
        if c.get(key, ok) != ok:
            raise InteropError(f"config.json: {key}={c.get(key)} has no seqlab variant; seqlab computes GPT-2 with "
                               f"{key}={ok}")
    d = int(c["n_embd"])
    return dict(src_vocab_size=int(c["vocab_size"]), d_model=d, n_heads=int(c["n_head"]),
                decoder_layers=int(c["n_layer"]), d_ff=int(c.get("n_inner") or 4 * d),
                activation=activation(c, "activation_function"), max_positions=int(c["n_positions"]),
                dropout=float(c.get("resid_pdrop", 0.1)), attention_dropout=float(c.get("attn_pdrop", 0.1)),
                layer_norm_eps=float(c.get("layer_norm_epsilon", 1e-5)),
                tie_embeddings="all" if c.get("tie_word_embeddings", True) else "none", **special(c), **choices)


def gpt2_export(cfg: ModelConfig) -> dict[str, Any]:
    return dict(vocab_size=cfg.src_vocab_size, n_embd=cfg.d_model, n_head=cfg.n_heads, n_layer=cfg.decoder_layers,
                n_inner=cfg.d_ff, activation_function=HF_ACTIVATION[cfg.activation], n_positions=cfg.max_positions,
                resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout, attn_pdrop=cfg.attention_dropout,
                layer_norm_epsilon=cfg.layer_norm_eps, tie_word_embeddings=cfg.tie_embeddings == "all",
                bos_token_id=cfg.bos_id, eos_token_id=eos_value(cfg), pad_token_id=cfg.pad_id)


def gpt2_weights(cfg: ModelConfig) -> WeightMap:
    """seqlab's parameters from GPT-2's names (transformer.h.N.attn.c_attn.weight, ...), Conv1D's transposed."""
    pairs: WeightMap = []
    for i in range(cfg.decoder_layers):
        o, t = f"decoder_layers.{i}", f"transformer.h.{i}"
        for ours, theirs in (("self_attn.qkv_proj", "attn.c_attn"), ("self_attn.out_proj", "attn.c_proj"),
                             ("ffn.fc1", "mlp.c_fc"), ("ffn.fc2", "mlp.c_proj")):
            pairs += [(f"{o}.{ours}.weight", [f"{t}.{theirs}.weight{TRANSPOSED}"]),
                      (f"{o}.{ours}.bias", [f"{t}.{theirs}.bias"])]
        pairs += norm_pairs(f"{o}.self_attn_res.norm", f"{t}.ln_1", cfg)
        pairs += norm_pairs(f"{o}.ffn_res.norm", f"{t}.ln_2", cfg)
    pairs += norm_pairs("decoder_norm", "transformer.ln_f", cfg)
    pairs.append(("tgt_embed.positions.weight", ["transformer.wpe.weight"]))
    return pairs + head_pairs(cfg, "transformer.wte.weight")


def head_pairs(cfg: ModelConfig, table: str) -> WeightMap:
    """The token table, and the head where it is not tied to it."""
    if cfg.tie_embeddings == "all":
        return [("tgt_embed.tokens.weight", [f"{table}|lm_head.weight"])]
    return [("tgt_embed.tokens.weight", [table]), ("output.weight", ["lm_head.weight"])]


def rope_theta(c: Mapping[str, Any]) -> float:
    """RoPE's base, where transformers 4 (`rope_theta`, `rope_scaling`) or 5 (`rope_parameters`) keep it;
    a rope scaling seqlab does not compute is refused."""
    params = dict(c.get("rope_parameters") or {})
    scaling = c.get("rope_scaling") or params
    kind = scaling.get("rope_type", scaling.get("type", "default")) if scaling else "default"
    if kind not in (None, "default"):
        raise InteropError(f"config.json: rope_scaling type {kind!r} is not computed by seqlab (its RoPE is the "
                           "default, unscaled one)")
    return float(params.get("rope_theta", c.get("rope_theta", 10000.0)))


def windows(c: Mapping[str, Any]) -> dict[str, Any]:
    """Sliding-window attention as transformers computes it: Mistral's `sliding_window` in every layer, Qwen2's
    (`use_sliding_window`) in the layers its `layer_types` mark `sliding_attention` (by default those from
    `max_window_layers` on)."""
    qwen2 = c.get("model_type") == "qwen2"
    sliding = c.get("sliding_window") if (c.get("use_sliding_window") or not qwen2) else None
    if not sliding:
        return {}
    n = int(c["num_hidden_layers"])
    types = c.get("layer_types")
    if types:
        layers = [i for i, kind in enumerate(types) if kind == "sliding_attention"]
    else:
        layers = [i for i in range(n) if i >= int(c.get("max_window_layers", 28))] if qwen2 else list(range(n))
    if not layers:
        return {}
    return dict(sliding_window=int(sliding), sliding_layers=None if len(layers) == n else tuple(layers))


def llama_config(c: Mapping[str, Any], choices: Mapping[str, Any]) -> dict[str, Any]:
    """Llama, Mistral and Qwen2 (`choices` add Qwen2's q/k/v biases)."""
    if c.get("num_local_experts") or c.get("num_experts"):
        raise InteropError("config.json: mixture-of-experts layers are not computed by seqlab")
    attention_bias, mlp_bias = bool(c.get("attention_bias", False)), bool(c.get("mlp_bias", False))
    if attention_bias != mlp_bias:
        raise InteropError(f"config.json: attention_bias={attention_bias} with mlp_bias={mlp_bias}: seqlab's `bias` "
                           "covers both; they must agree")
    heads = int(c["num_attention_heads"])
    d = int(c["hidden_size"])
    head_dim = int(c.get("head_dim") or d // heads)
    kv = int(c.get("num_key_value_heads") or heads)
    act = c.get("hidden_act", "silu")
    if act not in ACTIVATIONS:
        raise InteropError(f"config.json: hidden_act={act!r} has no exact seqlab activation")
    return dict(src_vocab_size=int(c["vocab_size"]), d_model=d, n_heads=heads,
                decoder_layers=int(c["num_hidden_layers"]), d_ff=int(c["intermediate_size"]),
                d_head=head_dim if head_dim * heads != d else None,
                kv_heads=kv if kv != heads else None, activation=ACTIVATIONS[act], bias=attention_bias,
                max_positions=int(c.get("max_position_embeddings", 2048)), rope_base=rope_theta(c), **windows(c),
                layer_norm_eps=float(c.get("rms_norm_eps", 1e-6)), attention_dropout=float(c.get("attention_dropout",
                                                                                                   0.0)),
                dropout=0.0, tie_embeddings="all" if c.get("tie_word_embeddings", False) else "none", **special(c),
                **choices)


def llama_export(cfg: ModelConfig) -> dict[str, Any]:
    return dict(vocab_size=cfg.src_vocab_size, hidden_size=cfg.d_model, num_attention_heads=cfg.n_heads,
                num_hidden_layers=cfg.decoder_layers, intermediate_size=cfg.d_ff, head_dim=cfg.head_dim,
                num_key_value_heads=cfg.key_value_heads, hidden_act=HF_ACTIVATION[cfg.activation],
                attention_bias=cfg.bias, mlp_bias=cfg.bias, max_position_embeddings=cfg.max_positions,
                rope_theta=cfg.rotary_base, rms_norm_eps=cfg.layer_norm_eps, attention_dropout=cfg.attention_dropout,
                tie_word_embeddings=cfg.tie_embeddings == "all", bos_token_id=cfg.bos_id, eos_token_id=eos_value(cfg),
                pad_token_id=cfg.pad_id)


def mistral_export(cfg: ModelConfig) -> dict[str, Any]:
    """Mistral's window covers every layer (a per-layer one does not come back: the export is refused)."""
    return {**llama_export(cfg), "sliding_window": cfg.sliding_window}


def qwen2_export(cfg: ModelConfig) -> dict[str, Any]:
    out = llama_export(cfg)
    del out["attention_bias"], out["mlp_bias"]  # Qwen2's biases are fixed: q, k, v only
    if cfg.sliding_window is None:
        return {**out, "use_sliding_window": False}
    sliding = set(range(cfg.decoder_layers) if cfg.sliding_layers is None else cfg.sliding_layers)
    types = ["sliding_attention" if i in sliding else "full_attention" for i in range(cfg.decoder_layers)]
    return {**out, "use_sliding_window": True, "sliding_window": cfg.sliding_window, "layer_types": types,
            "max_window_layers": min(sliding)}


def llama_weights(cfg: ModelConfig) -> WeightMap:
    """seqlab's parameters from Llama's names (model.layers.N.self_attn.q_proj.weight, ...)."""
    pairs: WeightMap = []
    kinds = ("weight", "bias") if cfg.projection_bias else ("weight",)
    for i in range(cfg.decoder_layers):
        o, t = f"decoder_layers.{i}", f"model.layers.{i}"
        pairs += [(f"{o}.self_attn.qkv_proj.{k}", [f"{t}.self_attn.{p}_proj.{k}" for p in "qkv"]) for k in kinds]
        pairs += [(f"{o}.self_attn.out_proj.{k}", [f"{t}.self_attn.o_proj.{k}"])
                  for k in (("weight", "bias") if cfg.bias else ("weight",))]
        for k in ("weight", "bias") if cfg.bias else ("weight",):
            pairs.append((f"{o}.ffn.fc1.{k}", [f"{t}.mlp.gate_proj.{k}", f"{t}.mlp.up_proj.{k}"]))
            pairs.append((f"{o}.ffn.fc2.{k}", [f"{t}.mlp.down_proj.{k}"]))
        pairs += norm_pairs(f"{o}.self_attn_res.norm", f"{t}.input_layernorm", cfg)
        pairs += norm_pairs(f"{o}.ffn_res.norm", f"{t}.post_attention_layernorm", cfg)
    pairs += norm_pairs("decoder_norm", "model.norm", cfg)
    return pairs + head_pairs(cfg, "model.embed_tokens.weight")


def phi3_config(c: Mapping[str, Any], choices: Mapping[str, Any]) -> dict[str, Any]:
    """Phi-3 / Phi-4-mini: Llama's computation with q, k, v and gate, up fused in one weight each, no biases,
    partial RoPE (`partial_rotary_factor`), dropout on the embedding and both residuals alike."""
    out = llama_config({k: v for k, v in c.items() if k not in ("attention_bias", "mlp_bias")}, choices)
    params = dict(c.get("rope_parameters") or {})
    factor = float(params.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0)))
    head = out["d_head"] or out["d_model"] // out["n_heads"]
    if factor != 1.0:
        out["rope_dim"] = int(head * factor)
    resid, embd = float(c.get("resid_pdrop", 0.0)), float(c.get("embd_pdrop", 0.0))
    if resid != embd:
        raise InteropError(f"config.json: resid_pdrop={resid} with embd_pdrop={embd}: seqlab's model.dropout covers "
                           "both; they must agree")
    return {**out, "dropout": resid}


def phi3_export(cfg: ModelConfig) -> dict[str, Any]:
    out = llama_export(cfg)
    del out["attention_bias"], out["mlp_bias"]  # Phi-3 has no biases
    return {**out, "sliding_window": cfg.sliding_window, "resid_pdrop": cfg.dropout, "embd_pdrop": cfg.dropout,
            "partial_rotary_factor": cfg.rotary_dim / cfg.head_dim, "original_max_position_embeddings":
            cfg.max_positions}


def phi3_weights(cfg: ModelConfig) -> WeightMap:
    """seqlab's parameters from Phi-3's names: its fused qkv_proj and gate_up_proj are seqlab's own layouts."""
    pairs: WeightMap = []
    for i in range(cfg.decoder_layers):
        o, t = f"decoder_layers.{i}", f"model.layers.{i}"
        pairs += [(f"{o}.self_attn.qkv_proj.weight", [f"{t}.self_attn.qkv_proj.weight"]),
                  (f"{o}.self_attn.out_proj.weight", [f"{t}.self_attn.o_proj.weight"]),
                  (f"{o}.ffn.fc1.weight", [f"{t}.mlp.gate_up_proj.weight"]),
                  (f"{o}.ffn.fc2.weight", [f"{t}.mlp.down_proj.weight"])]
        pairs += norm_pairs(f"{o}.self_attn_res.norm", f"{t}.input_layernorm", cfg)
        pairs += norm_pairs(f"{o}.ffn_res.norm", f"{t}.post_attention_layernorm", cfg)
    pairs += norm_pairs("decoder_norm", "model.norm", cfg)
    return pairs + head_pairs(cfg, "model.embed_tokens.weight")


LLAMA = dict(CAUSAL, norm="rmsnorm", positions="rope", gated_ffn=True)
CAUSAL_FAMILIES: dict[str, Family] = {
    "gpt2": Family("gpt2", dict(CAUSAL, positions="learned"), gpt2_config, gpt2_weights, gpt2_export,
                   "GPT2LMHeadModel"),
    "llama": Family("llama", LLAMA, llama_config, llama_weights, llama_export, "LlamaForCausalLM"),
    "mistral": Family("mistral", LLAMA, llama_config, llama_weights, mistral_export, "MistralForCausalLM"),
    "qwen2": Family("qwen2", dict(LLAMA, qkv_bias=True), llama_config, llama_weights, qwen2_export,
                    "Qwen2ForCausalLM"),
    "phi3": Family("phi3", LLAMA, phi3_config, phi3_weights, phi3_export, "Phi3ForCausalLM"),
}
