"""The Hugging Face encoder-decoder families as seqlab variants: each family is a set of ModelConfig choices
and a table from its parameter names to seqlab's. No model code branches on a family.

- marian (OPUS-MT): post-LN, sinusoids in Marian's layout, the config's activation, an output bias;
- bart: post-LN with an embedding LayerNorm, learned positions offset by 2, GELU, an output bias;
- mbart (cc25, 50): pre-LN with final norms and an embedding LayerNorm, learned positions offset by 2, GELU;
- pegasus: pre-LN with final norms, sinusoids in Marian's layout, ReLU, an output bias;
- m2m_100 (M2M100, NLLB): pre-LN with final norms, fairseq's sinusoids from pad + 1, ReLU, no output bias;
- t5, mt5 (T5 v1.0, v1.1, Flan-T5, mT5): pre-RMSNorm with final norms, T5's relative bias, no biases,
  unscaled attention, heads of d_kv; v1.0 ReLU and a tied head reading h * d^-1/2, v1.1 gated GELU-tanh
  and its own head.

`transformers` is not needed here: the config is the folder's `config.json` as a dict, the weights its
state dict (interop.hf_folder reads both).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from seqlab.model import ModelConfig


class InteropError(ValueError):
    """A model that has no exact counterpart on the other side; the message says what differs."""


# Hugging Face's activation names -> seqlab's (ACT2FN: gelu is the exact GELU, gelu_new its tanh form)
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "swish": "silu", "silu": "silu"}
WeightMap = list[tuple[str, list[str]]]  # (seqlab parameter, the family's parameters fused into it, in order)


@dataclass(frozen=True)
class Family:
    """One family: the ModelConfig choices that are the family, how its config.json maps to ModelConfig fields
    and back, its weight table (read both ways), and the transformers class that computes it. Export is
    checked against import: a model exports to a family only if importing the export gives its own config
    back (interop.hf_export.mismatches)."""

    name: str
    choices: Mapping[str, Any]  # ModelConfig fields fixed by the family
    config: Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, Any]]  # (config.json, choices) -> fields
    weights: Callable[[ModelConfig], WeightMap]
    export: Callable[[ModelConfig], dict[str, Any]]  # ModelConfig -> config.json's values (config's inverse)
    architecture: str  # the transformers class of a `save_pretrained` folder


def first_id(value: Any) -> int:
    """An id that config.json may give as a list (eos_token_id)."""
    return int(value[0] if isinstance(value, list | tuple) else value)


def end_ids(value: Any) -> dict[str, Any]:
    """config.json's eos_token_id (an id, or a list whose first is what a forced end writes) as ModelConfig's
    eos_id and extra_eos_ids."""
    ids = list(dict.fromkeys(int(i) for i in (value if isinstance(value, list | tuple) else [value])))
    return dict(eos_id=ids[0], extra_eos_ids=tuple(ids[1:]))


def eos_value(cfg: ModelConfig) -> int | list[int]:
    """end_ids' inverse: eos_token_id as config.json writes it, a list where the model has several."""
    return list(cfg.end_ids) if cfg.extra_eos_ids else cfg.eos_id


def activation(c: Mapping[str, Any], key: str) -> str:
    name = c.get(key, "relu")
    if name not in ACTIVATIONS:
        raise InteropError(f"config.json: {key}={name!r} has no exact seqlab activation; seqlab has "
                           f"{sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def bart_like_config(c: Mapping[str, Any], choices: Mapping[str, Any]) -> dict[str, Any]:
    """The ModelConfig fields of a BART-style config (BART, mBART, PEGASUS, Marian, M2M100/NLLB)."""
    for enc, dec in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if c.get(enc) != c.get(dec):
            raise InteropError(f"config.json: {enc}={c.get(enc)} and {dec}={c.get(dec)} differ; seqlab uses one "
                               "value for both stacks")
    pad = int(c["pad_token_id"])
    fields = dict(
        src_vocab_size=int(c["vocab_size"]), d_model=int(c["d_model"]), n_heads=int(c["encoder_attention_heads"]),
        encoder_layers=int(c["encoder_layers"]), decoder_layers=int(c["decoder_layers"]),
        d_ff=int(c["encoder_ffn_dim"]), dropout=float(c.get("dropout", 0.1)),
        attention_dropout=float(c.get("attention_dropout", 0.0)),
        activation_dropout=float(c.get("activation_dropout", 0.0)),
        encoder_layerdrop=float(c.get("encoder_layerdrop", 0.0)),
        decoder_layerdrop=float(c.get("decoder_layerdrop", 0.0)),
        activation=activation(c, "activation_function"), max_positions=int(c["max_position_embeddings"]),
        scale_embedding=bool(c.get("scale_embedding", False)), pad_id=pad,
        bos_id=int(c["decoder_start_token_id"]), **end_ids(c["eos_token_id"]),
        tie_embeddings="all" if c.get("tie_word_embeddings", True) else "inputs",
        **choices,
    )
    if fields.get("sinusoid_layout") == "fairseq":  # fairseq numbers real positions from pad + 1
        fields["position_offset"] = pad + 1
    return fields


def marian_config(c: Mapping[str, Any], choices: Mapping[str, Any]) -> dict[str, Any]:
    """Marian may keep separate source and target vocabularies (`share_encoder_decoder_embeddings`)."""
    fields = bart_like_config(c, choices)
    shared, tied = c.get("share_encoder_decoder_embeddings", True), c.get("tie_word_embeddings", True)
    if shared and not tied:
        raise InteropError("config.json: shared encoder/decoder embeddings with an untied output layer "
                           "(tie_word_embeddings=false) have no seqlab variant for Marian")
    if not shared:
        fields["tgt_vocab_size"] = int(c.get("decoder_vocab_size") or c["vocab_size"])
    fields["tie_embeddings"] = "all" if shared else ("decoder" if tied else "none")
    return fields


def t5_config(c: Mapping[str, Any], choices: Mapping[str, Any]) -> dict[str, Any]:
    """T5 v1.0 (ReLU, tied head reading h * d^-1/2), v1.1 / Flan-T5 / mT5 (gated GELU-tanh, own head)."""
    proj = str(c.get("feed_forward_proj", "relu"))
    gated = proj.startswith("gated-")
    act = "gelu_new" if proj == "gated-gelu" else proj.removeprefix("gated-")
    if act not in ACTIVATIONS:
        raise InteropError(f"config.json: feed_forward_proj={proj!r} has no exact seqlab activation")
    layers = int(c["num_layers"])
    # transformers reads the rescale from tie_word_embeddings (false: T5 v1.1) or its own scale_decoder_outputs
    rescale = c.get("scale_decoder_outputs", c.get("tie_word_embeddings", True) is not False)
    return dict(
        src_vocab_size=int(c["vocab_size"]), d_model=int(c["d_model"]), n_heads=int(c["num_heads"]),
        d_head=int(c["d_kv"]), encoder_layers=layers, decoder_layers=int(c.get("num_decoder_layers") or layers),
        d_ff=int(c["d_ff"]), dropout=float(c.get("dropout_rate", 0.1)), activation=ACTIVATIONS[act],
        gated_ffn=gated, t5_buckets=int(c.get("relative_attention_num_buckets", 32)),
        t5_max_distance=int(c.get("relative_attention_max_distance", 128)),
        layer_norm_eps=float(c.get("layer_norm_epsilon", 1e-6)), rescale_output=bool(rescale),
        pad_id=int(c.get("pad_token_id", 0)), bos_id=int(c.get("decoder_start_token_id", c.get("pad_token_id", 0))),
        **end_ids(c.get("eos_token_id", 1)), **choices,
    )


HF_ACTIVATION = {ours: theirs for theirs, ours in reversed(list(ACTIVATIONS.items()))}  # first name wins


def ids_export(cfg: ModelConfig) -> dict[str, Any]:
    return dict(pad_token_id=cfg.pad_id, eos_token_id=eos_value(cfg), decoder_start_token_id=cfg.bos_id)


def bart_like_export(cfg: ModelConfig) -> dict[str, Any]:
    """config.json's values of a BART-style model (bart_like_config's inverse)."""
    return dict(vocab_size=cfg.src_vocab_size, d_model=cfg.d_model, encoder_layers=cfg.encoder_layers,
                decoder_layers=cfg.decoder_layers, encoder_attention_heads=cfg.n_heads,
                decoder_attention_heads=cfg.n_heads, encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff,
                dropout=cfg.dropout, attention_dropout=cfg.attention_dropout,
                activation_dropout=cfg.activation_dropout, encoder_layerdrop=cfg.encoder_layerdrop,
                decoder_layerdrop=cfg.decoder_layerdrop, activation_function=HF_ACTIVATION[cfg.activation],
                max_position_embeddings=cfg.max_positions, scale_embedding=cfg.scale_embedding,
                forced_eos_token_id=None, tie_word_embeddings=cfg.tie_embeddings != "inputs", **ids_export(cfg))


def marian_export(cfg: ModelConfig) -> dict[str, Any]:
    """marian_config's inverse: Marian's own vocabulary and tying keys."""
    return {**bart_like_export(cfg), "decoder_vocab_size": cfg.target_vocab_size,
            "tie_word_embeddings": cfg.tie_embeddings != "none",
            "share_encoder_decoder_embeddings": cfg.tie_embeddings == "all"}


def t5_export(cfg: ModelConfig) -> dict[str, Any]:
    """t5_config's inverse. HF's `gated-gelu` is GELU-tanh (gelu_new); `tie_word_embeddings` says whether the
    decoder output is rescaled (transformers reads it as `scale_decoder_outputs`)."""
    act = "gelu" if cfg.gated_ffn and cfg.activation == "gelu_tanh" else HF_ACTIVATION[cfg.activation]
    return dict(vocab_size=cfg.src_vocab_size, d_model=cfg.d_model, d_kv=cfg.head_dim, d_ff=cfg.d_ff,
                num_layers=cfg.encoder_layers, num_decoder_layers=cfg.decoder_layers, num_heads=cfg.n_heads,
                relative_attention_num_buckets=cfg.relative_buckets,
                relative_attention_max_distance=cfg.relative_max_distance, dropout_rate=cfg.dropout,
                layer_norm_epsilon=cfg.layer_norm_eps, feed_forward_proj=("gated-" if cfg.gated_ffn else "") + act,
                tie_word_embeddings=cfg.rescale_output, **ids_export(cfg))


def _attention(ours: str, theirs: str, cross: bool, bias: bool, names: Mapping[str, str]) -> WeightMap:
    """One attention block: q, k, v fused as seqlab holds them (q;k;v, or q and k;v for cross-attention)."""
    kinds = ("weight", "bias") if bias else ("weight",)
    q, k, v, o = (names[p] for p in "qkvo")
    pairs: WeightMap = []
    for kind in kinds:
        if cross:
            pairs.append((f"{ours}.q_proj.{kind}", [f"{theirs}.{q}.{kind}"]))
            pairs.append((f"{ours}.kv_proj.{kind}", [f"{theirs}.{k}.{kind}", f"{theirs}.{v}.{kind}"]))
        else:
            pairs.append((f"{ours}.qkv_proj.{kind}", [f"{theirs}.{p}.{kind}" for p in (q, k, v)]))
        pairs.append((f"{ours}.out_proj.{kind}", [f"{theirs}.{o}.{kind}"]))
    return pairs


BART_ATTENTION = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj"}
T5_ATTENTION = {"q": "q", "k": "k", "v": "v", "o": "o"}


def norm_pairs(ours: str, theirs: str, cfg: ModelConfig) -> WeightMap:
    kinds = ("weight", "bias") if cfg.norm == "layernorm" else ("weight",)
    return [(f"{ours}.{k}", [f"{theirs}.{k}"]) for k in kinds]


def bart_weights(cfg: ModelConfig) -> WeightMap:
    """seqlab's parameters from BART-style names (model.encoder.layers.N.self_attn.q_proj.weight, ...)."""
    pairs: WeightMap = []
    for ours, theirs, count, decoder in (("encoder_layers", "model.encoder.layers", cfg.encoder_layers, False),
                                         ("decoder_layers", "model.decoder.layers", cfg.decoder_layers, True)):
        for i in range(count):
            o, t = f"{ours}.{i}", f"{theirs}.{i}"
            pairs += _attention(f"{o}.self_attn", f"{t}.self_attn", False, True, BART_ATTENTION)
            pairs += norm_pairs(f"{o}.self_attn_res.norm", f"{t}.self_attn_layer_norm", cfg)
            if decoder:
                pairs += _attention(f"{o}.cross_attn", f"{t}.encoder_attn", True, True, BART_ATTENTION)
                pairs += norm_pairs(f"{o}.cross_attn_res.norm", f"{t}.encoder_attn_layer_norm", cfg)
            pairs += [(f"{o}.ffn.{fc}.{k}", [f"{t}.{fc}.{k}"]) for fc in ("fc1", "fc2") for k in ("weight", "bias")]
            pairs += norm_pairs(f"{o}.ffn_res.norm", f"{t}.final_layer_norm", cfg)
    for side, embed in (("encoder", "src_embed"), ("decoder", "tgt_embed")):
        if cfg.layernorm_embedding:
            pairs += norm_pairs(f"{embed}.norm", f"model.{side}.layernorm_embedding", cfg)
        if cfg.use_final_norm:
            pairs += norm_pairs(f"{side}_norm", f"model.{side}.layer_norm", cfg)
        if cfg.positions == "learned":
            pairs.append((f"{embed}.positions.weight", [f"model.{side}.embed_positions.weight"]))
    pairs += embedding_pairs(cfg, "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
                             ("model.shared.weight",))
    if cfg.output_bias:
        pairs.append(("output.bias", ["final_logits_bias"]))
    return pairs


def embedding_pairs(cfg: ModelConfig, encoder: str, decoder: str, shared: tuple[str, ...]) -> WeightMap:
    """The token tables by tying. A shared table may be saved under any of its names (save_pretrained keeps
    one of the tied names), so each entry lists its candidates; `read` takes the first present."""
    head = "lm_head.weight"
    if cfg.tie_embeddings == "all":
        return [("src_embed.tokens.weight", [f"{'|'.join((*shared, encoder, decoder, head))}"])]
    if cfg.tie_embeddings == "inputs":
        return [("src_embed.tokens.weight", ["|".join((*shared, encoder, decoder))]), ("output.weight", [head])]
    pairs = [("src_embed.tokens.weight", ["|".join((encoder, *shared))])]
    if cfg.tie_embeddings == "decoder":
        return [*pairs, ("tgt_embed.tokens.weight", [f"{decoder}|{head}"])]
    return [*pairs, ("tgt_embed.tokens.weight", [decoder]), ("output.weight", [head])]


def t5_weights(cfg: ModelConfig) -> WeightMap:
    """seqlab's parameters from T5's names (encoder.block.N.layer.0.SelfAttention.q.weight, ...)."""
    pairs: WeightMap = []
    ffn = ["wi_0", "wi_1"] if cfg.gated_ffn else ["wi"]
    for ours, stack, count, decoder in (("encoder_layers", "encoder", cfg.encoder_layers, False),
                                        ("decoder_layers", "decoder", cfg.decoder_layers, True)):
        for i in range(count):
            o, t = f"{ours}.{i}", f"{stack}.block.{i}.layer"
            pairs += _attention(f"{o}.self_attn", f"{t}.0.SelfAttention", False, False, T5_ATTENTION)
            pairs += norm_pairs(f"{o}.self_attn_res.norm", f"{t}.0.layer_norm", cfg)
            f = 2 if decoder else 1
            if decoder:
                pairs += _attention(f"{o}.cross_attn", f"{t}.1.EncDecAttention", True, False, T5_ATTENTION)
                pairs += norm_pairs(f"{o}.cross_attn_res.norm", f"{t}.1.layer_norm", cfg)
            pairs.append((f"{o}.ffn.fc1.weight", [f"{t}.{f}.DenseReluDense.{w}.weight" for w in ffn]))
            pairs.append((f"{o}.ffn.fc2.weight", [f"{t}.{f}.DenseReluDense.wo.weight"]))
            pairs += norm_pairs(f"{o}.ffn_res.norm", f"{t}.{f}.layer_norm", cfg)
        pairs += norm_pairs(f"{stack}_norm", f"{stack}.final_layer_norm", cfg)
        pairs.append((f"{stack}_positions.bias.weight", [f"{stack}.block.0.layer.0.SelfAttention."
                                                         "relative_attention_bias.weight"]))
    return [*pairs, *embedding_pairs(cfg, "encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                                     ("shared.weight",))]


BART_CHOICES = dict(positions="learned", position_offset=2, layernorm_embedding=True, output_bias=True)
ENCODER_DECODER: dict[str, Family] = {
    "marian": Family("marian", dict(norm_position="post", positions="sinusoidal", layernorm_embedding=False,
                                    final_norm=False, output_bias=True), marian_config, bart_weights, marian_export,
                     "MarianMTModel"),
    "bart": Family("bart", dict(norm_position="post", final_norm=False, **BART_CHOICES), bart_like_config,
                   bart_weights, bart_like_export, "BartForConditionalGeneration"),
    "mbart": Family("mbart", dict(norm_position="pre", final_norm=True, **BART_CHOICES), bart_like_config,
                    bart_weights, bart_like_export, "MBartForConditionalGeneration"),
    "pegasus": Family("pegasus", dict(norm_position="pre", final_norm=True, positions="sinusoidal",
                                      output_bias=True), bart_like_config, bart_weights, bart_like_export,
                      "PegasusForConditionalGeneration"),
    "m2m_100": Family("m2m_100", dict(norm_position="pre", final_norm=True, positions="sinusoidal",
                                      sinusoid_layout="fairseq", output_bias=False), bart_like_config,
                      bart_weights, bart_like_export, "M2M100ForConditionalGeneration"),
    "t5": Family("t5", dict(norm="rmsnorm", norm_position="pre", final_norm=True, positions="t5", bias=False,
                            scale_attention=False, scale_embedding=False), t5_config, t5_weights, t5_export,
                 "T5ForConditionalGeneration"),
}
def untie_where_saved(cfg: ModelConfig, state: Mapping[str, Tensor], family: Family) -> ModelConfig:
    """Tying as the weights have it: transformers keeps a saved `lm_head.weight` that differs from the table
    it would be tied to (Flan-T5's head), so seqlab unties it too."""
    head = state.get("lm_head.weight")
    if head is None or cfg.tie_embeddings not in ("all", "decoder"):
        return cfg
    # the table the head is tied to: the shared one, or the decoder's (a one-stack model's only one)
    decoder = cfg.tie_embeddings == "decoder" or cfg.layout.one_sequence
    table = dict(family.weights(cfg))["tgt_embed.tokens.weight" if decoder else "src_embed.tokens.weight"][0]
    names = [n for n in table.split("|") if n != "lm_head.weight"]
    tied_to = next((state[n] for n in names if n in state), None)
    if tied_to is None or torch.equal(tied_to, head):
        return cfg
    return replace(cfg, tie_embeddings="none" if decoder else "inputs")


TRANSPOSED = "@T"  # a part stored as (in, out), as GPT-2's Conv1D keeps its weights: transposed both ways
PLUS_ONE = "@+1"  # a norm's gain stored as g - 1, as Gemma's RMSNorm computes x * (1 + w): seqlab's g = 1 + w


def bare(part: str) -> str:
    """A part's name without its layout mark."""
    return part.removesuffix(TRANSPOSED).removesuffix(PLUS_ONE)


def stored_name(part: str) -> str:
    """The name a weight table's part has in the family's state dict (the first of its candidates)."""
    return bare(part.split("|")[0])


def to_seqlab(part: str, tensor: Tensor) -> Tensor:
    """A stored part in seqlab's layout."""
    if part.endswith(TRANSPOSED):
        return tensor.t()
    return tensor.float() + 1.0 if part.endswith(PLUS_ONE) else tensor


def to_family(part: str, tensor: Tensor) -> Tensor:
    """`to_seqlab`'s inverse."""
    if part.endswith(TRANSPOSED):
        return tensor.t()
    return tensor - 1.0 if part.endswith(PLUS_ONE) else tensor


def read(state: Mapping[str, Tensor], names: str) -> Tensor:
    """The first of `a|b|c` present in the state dict, in seqlab's (out, in) layout."""
    for name in names.split("|"):
        if bare(name) in state:
            return to_seqlab(name, state[bare(name)])
    raise KeyError(stored_name(names))


def seqlab_state(cfg: ModelConfig, family: Family, state: Mapping[str, Tensor], where: str) -> dict[str, Tensor]:
    """seqlab's state dict (fp32) from the family's, with every parameter accounted for."""
    ours: dict[str, Tensor] = {}
    for name, parts in family.weights(cfg):
        try:
            tensors = [read(state, p) for p in parts]
        except KeyError as err:
            raise InteropError(f"{where}: the weights have no {err.args[0]!r}, which a {family.name} model with "
                               f"this config.json needs; the checkpoint and config.json do not match") from None
        try:
            ours[name] = torch.cat([t.float() for t in tensors], dim=0)
        except RuntimeError:
            raise InteropError(f"{where}: the weights {[p.split('|')[0] for p in parts]} have shapes "
                               f"{[tuple(t.shape) for t in tensors]}, which do not fit together as config.json "
                               "describes them; the weights and config.json belong to different models") from None
    if "output.bias" in ours:
        ours["output.bias"] = ours["output.bias"].reshape(-1)
    return ours
