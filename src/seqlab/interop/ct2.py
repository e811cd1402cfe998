"""Export to CTranslate2, OpenNMT's inference engine, through its Transformer specification API (the engine
that decodes seqlab checkpoints through it is engines.ct2).

`ctranslate2` is an optional extra (`pip install seqlab[ct2]`), imported only here and only when
called. Every variant the specification expresses is exported: pre/post-LN (pre-LN with or
without its final norms), sinusoidal or learned positions (the table is written out, so
CTranslate2 adds exactly seqlab's), rotary positions (`rotary_interleave=False`: seqlab's rotate-half
layout), T5's relative bias (the stack's one table given to every layer, as CTranslate2's own T5
converter does), no positions (a table of zeros), tying none/decoder/all, scaled or unscaled embeddings, an
embedding LayerNorm, ReLU/GELU/SiLU, an output bias, the layer-norm epsilon, and the tokenizer's
pieces and special tokens. What it cannot express (copy attention; a final norm after a post-LN
stack) is refused before anything is written, naming the key.

Decoding starts from BOS (`decoder_start_token`) and sources are passed with seqlab's own
tokens (EOS appended, no BOS), so both engines see the same ids.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seqlab.constants import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from seqlab.data.protocol import TextTokenizer
from seqlab.interop.hf import InteropError
from seqlab.model import Model, ModelConfig

# CTranslate2's weight types (`ctranslate2.Translator(compute_type=...)` picks the computation)
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16")
# seqlab's exact (erf) GELU is CTranslate2's GELU; its tanh form (T5 v1.1's gelu_new) CTranslate2's GELUTanh
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_tanh": "GELUTanh", "silu": "SWISH"}
SPECIALS = {"pad": "<pad>", "unk": "<unk>", "bos": "<s>", "eos": "</s>"}


def ct2_class(cfg: ModelConfig) -> str:
    """The CTranslate2 class that decodes the model (its layout's: Translator or Generator); refused by name where
    none computes it."""
    if cfg.layout.ct2_class is None:
        raise InteropError(f"{cfg.layout.unexportable}; decode it with engine=seqlab")
    return cfg.layout.ct2_class


def check_exportable(cfg: ModelConfig) -> None:
    """Fail, naming the key, on what CTranslate2's Transformer specifications cannot express."""
    gemma = [f"model.{k}={getattr(cfg, k)}" for k in ("sandwich_norm", "attention_scalar", "attn_softcap",
                                                      "logit_softcap", "qk_norm", "local_rope_base")
             if getattr(cfg, k) not in (None, False)]
    if gemma:
        raise InteropError(f"{', '.join(gemma)}: seqlab's CTranslate2 export does not write Gemma's departures; "
                           "decode with engine=seqlab")
    if cfg.sliding_window is not None:
        raise InteropError(f"model.sliding_window={cfg.sliding_window}: seqlab's CTranslate2 export writes full "
                           "attention, which would read past the window; decode with engine=seqlab")
    ct2_class(cfg)
    if cfg.layout.cross_attention and (cfg.kv_heads is not None or cfg.qkv_bias is not None):
        raise InteropError(f"model.kv_heads={cfg.kv_heads}, model.qkv_bias={cfg.qkv_bias}: the encoder-decoder "
                           "export writes fused multi-head projections with one bias rule; set both to null")
    if cfg.copy_attention:
        raise InteropError("model.copy_attention=true: CTranslate2's Transformer has no copy attention "
                           "(pointer-generator output); export a model trained with model.copy_attention=false")
    if cfg.positions == "alibi" and cfg.layout.cross_attention:
        raise InteropError("model.positions=alibi: CTranslate2 has ALiBi in decoders only, not in the encoder; "
                           "export a model trained with model.positions=rope, t5, sinusoidal or learned")
    if cfg.norm_position == "post" and cfg.use_final_norm:
        raise InteropError("model.final_norm=true with model.norm_position=post: CTranslate2 has final norms "
                           "only for pre-LN stacks; use model.final_norm=null (none for post-LN)")


def special_ids(cfg: ModelConfig, tokenizer: TextTokenizer | None) -> dict[str, int]:
    """The model's ids of CTranslate2's special tokens: seqlab's 0-3, or an imported family's own (BART's
    decoder start is its EOS, T5's its pad)."""
    unk = tokenizer.unk_id if tokenizer is not None else UNK_ID
    ids = {"pad": cfg.pad_id, "unk": unk, "eos": cfg.eos_id}
    if cfg.bos_id not in ids.values() and not language_start(cfg, tokenizer):
        ids["bos"] = cfg.bos_id
    return ids


def language_start(cfg: ModelConfig, tokenizer: TextTokenizer | None) -> bool:
    """Whether the decoder starts from the target language's code (mBART-cc25), a piece like any other."""
    return tokenizer is not None and tokenizer.layout is not None and tokenizer.layout.decoder_start == cfg.bos_id


def start_token(cfg: ModelConfig, tokenizer: TextTokenizer | None) -> str:
    """The name CTranslate2 starts decoding from: the special token at the model's decoder start id, or the
    target language's code."""
    if language_start(cfg, tokenizer):
        return tokenizer.id_to_piece(cfg.bos_id)
    return SPECIALS[next(name for name, i in special_ids(cfg, tokenizer).items() if i == cfg.bos_id)]


def vocabulary(tokenizer: TextTokenizer | None, side: str, size: int, cfg: ModelConfig | None = None) -> list[str]:
    """The pieces by id, the model's special ids carrying CTranslate2's special tokens (seqlab's 0-3 by
    default). Without a tokenizer (a benchmark's random model) piece i is named `t<i>`; ids past the
    tokenizer's pieces (T5's spare embedding rows) `<extra_row_i>`."""
    known = size if tokenizer is None else tokenizer.src_vocab_size if side == "src" else tokenizer.tgt_vocab_size
    pieces = [tokenizer.id_to_piece(i, side) if tokenizer is not None and i < known else
              (f"t{i}" if tokenizer is None else f"<extra_row_{i}>") for i in range(size)]
    specials = special_ids(cfg, tokenizer) if cfg is not None else {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID,
                                                                    "eos": EOS_ID}
    names = set(SPECIALS[n] for n in specials)
    pieces = [f"{p}#{i}" if p in names and i not in specials.values() else p for i, p in enumerate(pieces)]
    for name, i in specials.items():
        pieces[i] = SPECIALS[name]
    if len(set(pieces)) != len(pieces):
        raise InteropError(f"the {side} vocabulary has repeated pieces; CTranslate2 needs unique tokens")
    return pieces


def _array(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float32).cpu().numpy().copy()


def _linear(spec: Any, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    spec.weight = _array(weight)
    if bias is not None:
        spec.bias = _array(bias)


def _norm(spec: Any, norm: torch.nn.Module) -> None:
    spec.gamma = _array(norm.weight)
    if getattr(norm, "bias", None) is not None:  # RMSNorm has a gain alone
        spec.beta = _array(norm.bias)


def _attention(spec: Any, attn: Any, norm: torch.nn.Module) -> None:
    """Self-attention: linear[0] = fused q;k;v, linear[1] = out. Cross: q, fused k;v, out (seqlab's layout).
    Unscaled attention (T5) takes queries_scale 1 in place of 1/sqrt(d_head)."""
    if attn.scale is not None:
        spec.queries_scale = np.dtype("float32").type(attn.scale)
    if attn.cross:
        _linear(spec.linear[0], attn.q_proj.weight, attn.q_proj.bias)
        _linear(spec.linear[1], attn.kv_proj.weight, attn.kv_proj.bias)
    else:
        _linear(spec.linear[0], attn.qkv_proj.weight, attn.qkv_proj.bias)
    _linear(spec.linear[-1], attn.out_proj.weight, attn.out_proj.bias)
    _norm(spec.layer_norm, norm)


def _embeddings(stack: Any, embedder: Any, cfg: ModelConfig, tokens: Any) -> None:
    tokens.weight = _array(embedder.tokens.weight)
    stack.scale_embeddings = cfg.scale_embedding
    if hasattr(stack, "position_encodings"):  # absolute positions; a relative scheme adds a table of zeros
        positions = embedder.positions
        table = {"sinusoidal": lambda: positions.table, "learned": lambda: positions.weight}.get(
            cfg.positions, lambda: torch.zeros(cfg.max_positions, cfg.d_model))()[cfg.position_offset:]
        stack.position_encodings.encodings = _array(table)
    if embedder.norm is not None:
        _norm(stack.layernorm_embedding, embedder.norm)


def _relative_bias(spec: Any, positions: Any, cfg: ModelConfig) -> None:
    """T5's bias table (buckets, heads) of the stack, in every layer (CTranslate2 buckets bidirectionally in
    the encoder and causally in the decoder, as seqlab does)."""
    if cfg.positions == "t5":
        spec.relative_attention_bias = _array(positions.bias.weight)
        spec.relative_attention_max_distance = np.dtype("int32").type(cfg.relative_max_distance)


def _ffn(spec: Any, layer: Any) -> None:
    if layer.ffn.gated:  # CTranslate2's GLU: act(linear_0 x) * linear_0_noact x
        fc1 = layer.ffn.fc1
        (gate, up), (b_gate, b_up) = fc1.weight.chunk(2), (fc1.bias.chunk(2) if fc1.bias is not None else (None, None))
        _linear(spec.linear_0, gate, b_gate)
        _linear(spec.linear_0_noact, up, b_up)
        _linear(spec.linear_1, layer.ffn.fc2.weight, layer.ffn.fc2.bias)
        _norm(spec.layer_norm, layer.ffn_res.norm)
        return
    _linear(spec.linear_0, layer.ffn.fc1.weight, layer.ffn.fc1.bias)
    _linear(spec.linear_1, layer.ffn.fc2.weight, layer.ffn.fc2.bias)
    _norm(spec.layer_norm, layer.ffn_res.norm)


def _stack_options(cfg: ModelConfig) -> dict[str, Any]:
    """The options every CTranslate2 stack specification of this model takes."""
    from ctranslate2.specs import common_spec

    common = dict(pre_norm=cfg.norm_position == "pre",
                  activation=getattr(common_spec.Activation, ACTIVATIONS[cfg.activation]),
                  layernorm_embedding=cfg.layernorm_embedding, no_final_norm=not cfg.use_final_norm,
                  ffn_glu=cfg.gated_ffn, rms_norm=cfg.norm == "rmsnorm", head_dim=cfg.d_head)
    if cfg.positions == "rope":
        common.update(rotary_dim=cfg.rotary_dim, rotary_interleave=False, rotary_base=cfg.rotary_base)
    common["relative_attention_bias"] = cfg.positions == "t5"
    return common


def _head(spec: Any, model: Any) -> None:
    """The output projection (and T5 v1.0's rescaling of a tied head's input: h * d^-1/2)."""
    _linear(spec.projection, model.output.weight, model.output.bias)
    if model.output_scale is not None:
        spec.scale_outputs = np.dtype("float32").type(model.output_scale)


def to_spec(model: Model, tokenizer: TextTokenizer | None) -> Any:
    """The CTranslate2 specification holding the model's weights, vocabularies and special tokens: a
    TransformerSpec for an encoder-decoder (its Translator), a TransformerDecoderModelSpec for a decoder-only
    model (its Generator)."""
    from ctranslate2.specs import transformer_spec

    cfg = model.cfg
    check_exportable(cfg)
    if cfg.layout.ct2_class == "Generator":
        return _generator_spec(model, tokenizer)
    common = _stack_options(cfg)
    encoder = transformer_spec.TransformerEncoderSpec(cfg.encoder_layers, cfg.n_heads, **common)
    decoder = transformer_spec.TransformerDecoderSpec(cfg.decoder_layers, cfg.n_heads, **common)
    _embeddings(encoder, model.src_embed, cfg, encoder.embeddings[0])
    _embeddings(decoder, model.tgt_embed, cfg, decoder.embeddings)
    for spec, layer in zip(encoder.layer, model.encoder_layers, strict=True):
        _attention(spec.self_attention, layer.self_attn, layer.self_attn_res.norm)
        _relative_bias(spec.self_attention, model.encoder_positions, cfg)
        _ffn(spec.ffn, layer)
    for spec, layer in zip(decoder.layer, model.decoder_layers, strict=True):
        _attention(spec.self_attention, layer.self_attn, layer.self_attn_res.norm)
        _relative_bias(spec.self_attention, model.decoder_positions, cfg)
        _attention(spec.attention, layer.cross_attn, layer.cross_attn_res.norm)
        _ffn(spec.ffn, layer)
    if cfg.use_final_norm:
        _norm(encoder.layer_norm, model.encoder_norm)
        _norm(decoder.layer_norm, model.decoder_norm)
    _head(decoder, model)
    spec = transformer_spec.TransformerSpec(encoder, decoder)
    spec.config.layer_norm_epsilon = cfg.layer_norm_eps
    spec.config.add_source_bos = spec.config.add_source_eos = False  # seqlab's source ids are passed as they are
    spec.config.decoder_start_token = start_token(cfg, tokenizer)
    if "bos" not in special_ids(cfg, tokenizer) and not language_start(cfg, tokenizer):  # BART starts from </s>
        spec.config.bos_token = spec.config.decoder_start_token
    spec.register_source_vocabulary(vocabulary(tokenizer, "src", cfg.src_vocab_size, cfg))
    spec.register_target_vocabulary(vocabulary(tokenizer, "tgt", cfg.target_vocab_size, cfg))
    return spec


def _generator_spec(model: Model, tokenizer: TextTokenizer | None) -> Any:
    """A decoder-only model as CTranslate2's TransformerDecoderModelSpec: the one stack's self-attention layers
    (grouped-query heads as `num_heads_kv`; the fused q;k;v projection is seqlab's layout, its biases
    included), ALiBi with the slopes CTranslate2 computes as seqlab does, and the one vocabulary. A model
    seqlab trained (model.start=bos) is given its source, then the decoder start token; an imported causal LM
    its prompt (engines.ct2.generator_prompts)."""
    from ctranslate2.specs import transformer_spec

    cfg = model.cfg
    decoder = transformer_spec.TransformerDecoderSpec(
        cfg.decoder_layers, cfg.n_heads, with_encoder_attention=False, alibi=cfg.positions == "alibi",
        num_heads_kv=cfg.kv_heads, **_stack_options(cfg))
    _embeddings(decoder, model.tgt_embed, cfg, decoder.embeddings)
    for spec, layer in zip(decoder.layer, model.decoder_layers, strict=True):
        _attention(spec.self_attention, layer.self_attn, layer.self_attn_res.norm)
        _relative_bias(spec.self_attention, model.decoder_positions, cfg)
        _ffn(spec.ffn, layer)
    if cfg.use_final_norm:
        _norm(decoder.layer_norm, model.decoder_norm)
    _head(decoder, model)
    spec = transformer_spec.TransformerDecoderModelSpec(decoder)
    spec.config.layer_norm_epsilon = cfg.layer_norm_eps
    pieces = vocabulary(tokenizer, "tgt", cfg.target_vocab_size, cfg)
    names = {i: p for i, p in enumerate(pieces)}
    spec.config.unk_token = names[special_ids(cfg, tokenizer)["unk"]]
    spec.config.eos_token = names[cfg.eos_id]
    spec.config.bos_token = names[cfg.bos_id]
    spec.register_vocabulary(pieces)
    return spec


def export_ctranslate2(model: Model, tokenizer: TextTokenizer | None, out: str | Path,
                       quantization: str | None = None) -> Path:
    """Write a CTranslate2 model directory; nothing is left at `out` unless the whole export succeeds."""
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise InteropError(f"quantization={quantization!r} is not one of {list(QUANTIZATIONS)}")
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise InteropError("CTranslate2 is not installed: pip install 'seqlab[ct2]' (make install does)") from None
    spec = to_spec(model, tokenizer)  # refuses what it cannot express before anything is written
    spec.validate()
    spec.optimize(quantization=None if quantization == "float32" else quantization)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        spec.save(str(staging))
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out
