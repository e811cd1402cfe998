"""Export to CTranslate2, OpenNMT's inference engine, through its Transformer specification API.

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

from seqlab.config import ConfigError
from seqlab.constants import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from seqlab.data.sequences import pad_right
from seqlab.data.tokenizer import Tokenizer
from seqlab.decoding import DecodingConfig, GenerateOutput, score
from seqlab.decoding.generate import max_new_tokens
from seqlab.decoding.search import normalized
from seqlab.digest import file_digest
from seqlab.interop.hf import InteropError
from seqlab.model import ModelConfig, Seq2SeqTransformer

# CTranslate2's weight types (`ctranslate2.Translator(compute_type=...)` picks the computation)
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16")
# seqlab's exact (erf) GELU is CTranslate2's GELU; its tanh form (T5 v1.1's gelu_new) CTranslate2's GELUTanh
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_tanh": "GELUTanh", "silu": "SWISH"}
SPECIALS = {"pad": "<pad>", "unk": "<unk>", "bos": "<s>", "eos": "</s>"}


def check_exportable(cfg: ModelConfig) -> None:
    """Fail, naming the key, on what CTranslate2's Transformer specification cannot express."""
    if cfg.copy_attention:
        raise InteropError("model.copy_attention=true: CTranslate2's Transformer has no copy attention "
                           "(pointer-generator output); export a model trained with model.copy_attention=false")
    if cfg.positions == "alibi":
        raise InteropError("model.positions=alibi: CTranslate2 has ALiBi in decoders only, not in the encoder; "
                           "export a model trained with model.positions=rope, t5, sinusoidal or learned")
    if cfg.norm_position == "post" and cfg.use_final_norm:
        raise InteropError("model.final_norm=true with model.norm_position=post: CTranslate2 has final norms "
                           "only for pre-LN stacks; use model.final_norm=null (none for post-LN)")


def special_ids(cfg: ModelConfig, tokenizer: Any) -> dict[str, int]:
    """The model's ids of CTranslate2's special tokens: seqlab's 0-3, or an imported family's own (BART's
    decoder start is its EOS, T5's its pad)."""
    unk = getattr(tokenizer, "unk_id", UNK_ID) if tokenizer is not None else UNK_ID
    ids = {"pad": cfg.pad_id, "unk": unk, "eos": cfg.eos_id}
    if cfg.bos_id not in ids.values() and not language_start(cfg, tokenizer):
        ids["bos"] = cfg.bos_id
    return ids


def language_start(cfg: ModelConfig, tokenizer: Any) -> bool:
    """Whether the decoder starts from the target language's code (mBART-cc25), a piece like any other."""
    layout = getattr(tokenizer, "layout", None)
    return layout is not None and layout.decoder_start == cfg.bos_id


def start_token(cfg: ModelConfig, tokenizer: Any) -> str:
    """The name CTranslate2 starts decoding from: the special token at the model's decoder start id, or the
    target language's code."""
    if language_start(cfg, tokenizer):
        return tokenizer.id_to_piece(cfg.bos_id)
    return SPECIALS[next(name for name, i in special_ids(cfg, tokenizer).items() if i == cfg.bos_id)]


def vocabulary(tokenizer: Any, side: str, size: int, cfg: ModelConfig | None = None) -> list[str]:
    """The pieces by id, the model's special ids carrying CTranslate2's special tokens (seqlab's 0-3 by
    default). Without a tokenizer (a benchmark's random model) piece i is named `t<i>`; ids past the
    tokenizer's pieces (T5's spare embedding rows) `<extra_row_i>`."""
    known = getattr(tokenizer, "src_vocab_size" if side == "src" else "tgt_vocab_size", size)
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


def to_spec(model: Seq2SeqTransformer, tokenizer: Tokenizer | None) -> Any:
    """The CTranslate2 TransformerSpec holding the model's weights, vocabularies and special tokens."""
    from ctranslate2.specs import common_spec, transformer_spec

    cfg = model.cfg
    check_exportable(cfg)
    pre = cfg.norm_position == "pre"
    common = dict(pre_norm=pre, activation=getattr(common_spec.Activation, ACTIVATIONS[cfg.activation]),
                  layernorm_embedding=cfg.layernorm_embedding, no_final_norm=not cfg.use_final_norm,
                  ffn_glu=cfg.gated_ffn, rms_norm=cfg.norm == "rmsnorm",
                  head_dim=cfg.d_head)
    if cfg.positions == "rope":
        common.update(rotary_dim=cfg.rotary_dim, rotary_interleave=False, rotary_base=cfg.rotary_base)
    common["relative_attention_bias"] = cfg.positions == "t5"
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
    _linear(decoder.projection, model.output.weight, model.output.bias)
    if model.output_scale is not None:  # T5 v1.0's tied head reads h * d^-1/2
        decoder.scale_outputs = np.dtype("float32").type(model.output_scale)
    spec = transformer_spec.TransformerSpec(encoder, decoder)
    spec.config.layer_norm_epsilon = cfg.layer_norm_eps
    spec.config.add_source_bos = spec.config.add_source_eos = False  # seqlab's source ids are passed as they are
    spec.config.decoder_start_token = start_token(cfg, tokenizer)
    if "bos" not in special_ids(cfg, tokenizer) and not language_start(cfg, tokenizer):  # BART starts from </s>
        spec.config.bos_token = spec.config.decoder_start_token
    spec.register_source_vocabulary(vocabulary(tokenizer, "src", cfg.src_vocab_size, cfg))
    spec.register_target_vocabulary(vocabulary(tokenizer, "tgt", cfg.target_vocab_size, cfg))
    return spec


def export_ctranslate2(model: Seq2SeqTransformer, tokenizer: Tokenizer | None, out: str | Path,
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


# -- decoding with CTranslate2 through seqlab ----------------------------------------------------------
def suppressed_ids(cfg: ModelConfig) -> list[int]:
    """seqlab's rule (decoding.suppress_special): pad and the decoder start token, unless it is EOS."""
    return sorted({cfg.pad_id, cfg.bos_id} - {cfg.eos_id})


# DecodingConfig fields CTranslate2's search takes, and fields it has no equivalent for (refused by name).
# (bad_words_ids and suppress_tokens go across as CTranslate2's suppress_sequences: `banned_sequences`)
UNSUPPORTED = ("repetition_penalty", "frequency_penalty", "presence_penalty", "mbr", "force_eos", "sequence_bias",
               "forced_bos_token_id", "renormalize_logits", "coverage_penalty", "constraints")


def check_decodable(cfg: DecodingConfig) -> None:
    """Fail, naming the key, on a decoding setting the CTranslate2 engine does not reproduce."""
    if cfg.method == "sample":
        raise ConfigError("engine=ctranslate2 decodes with method=greedy or beam (its sampling is not seeded per "
                          "source, so not batch-invariant); use engine=seqlab for decoding.method=sample")
    if cfg.method not in ("greedy", "beam"):
        raise ConfigError(f"engine=ctranslate2 has no decoding.method={cfg.method}; use engine=seqlab")
    if cfg.num_beam_groups > 1:
        raise ConfigError("engine=ctranslate2 has no diverse beam search (decoding.num_beam_groups); "
                          "use engine=seqlab")
    if cfg.length_rule != "power":
        raise ConfigError(f"engine=ctranslate2 normalizes by length ** length_penalty only, not decoding.length_rule="
                          f"{cfg.length_rule}; use length_rule=power or engine=seqlab")
    for key in UNSUPPORTED:
        if getattr(cfg, key) not in (None, False):
            raise ConfigError(f"engine=ctranslate2 does not take decoding.{key}={getattr(cfg, key)!r}; "
                              f"set it to null/false or use engine=seqlab")


class CT2Engine:
    """A CTranslate2 translator of one exported checkpoint, used like `seqlab.decoding.generate`.

    Its tokens come from CTranslate2's search; their token log-probs and the reported scores are
    seqlab's (teacher-forced by the same weights in fp32), so metrics mean the same for both
    engines. CTranslate2 takes one maximum length per batch: the batch's largest per-example
    limit is used and longer outputs are cut at their own limit (exact for greedy search).
    """

    def __init__(self, path: Path, model: Seq2SeqTransformer, tokenizer: Tokenizer | None,
                 compute_type: str = "float32",
                 threads: int | None = None, device: str = "cpu", device_index: int = 0) -> None:
        import ctranslate2

        self.path, self.model = Path(path), model
        self.translator = ctranslate2.Translator(str(path), device=device, device_index=device_index,
                                                 compute_type=compute_type,
                                                 intra_threads=threads or torch.get_num_threads())
        self.src_tokens = vocabulary(tokenizer, "src", model.cfg.src_vocab_size, model.cfg)
        tgt = vocabulary(tokenizer, "tgt", model.cfg.target_vocab_size, model.cfg)
        self.tgt_pieces, self.tgt_index = tgt, {t: i for i, t in enumerate(tgt)}

    @classmethod
    def for_checkpoint(cls, checkpoint: Path, model: Seq2SeqTransformer, tokenizer: Tokenizer, cache_dir: Path,
                       quantization: str | None = None, compute_type: str = "float32") -> CT2Engine:
        """Export the checkpoint once into cache_dir (keyed on the file's digest and the quantization)."""
        folder = Path(cache_dir) / "ctranslate2" / f"{file_digest(checkpoint)[:16]}-{quantization or 'float32'}"
        if not (folder / "model.bin").is_file():
            export_ctranslate2(model, tokenizer, folder, quantization)
        return cls(folder, model, tokenizer, compute_type)

    def options(self, cfg: DecodingConfig, max_length: int) -> dict[str, Any]:
        check_decodable(cfg)
        return dict(beam_size=cfg.num_beams if cfg.method == "beam" else 1, num_hypotheses=cfg.n_best,
                    length_penalty=cfg.length_penalty, max_decoding_length=max_length,
                    min_decoding_length=cfg.min_length, no_repeat_ngram_size=cfg.no_repeat_ngram_size or 0,
                    suppress_sequences=self.banned_sequences(cfg) or None, return_scores=False)

    def banned_sequences(self, cfg: DecodingConfig) -> list[list[str]]:
        """CTranslate2's `suppress_sequences` for seqlab's bans: its pad/start rule, `suppress_tokens` and
        `bad_words_ids` (a sequence is never completed: its last token is banned after the rest, as Hugging
        Face's NoBadWordsLogitsProcessor; EOS alone is dropped as there)."""
        ids = [[i] for i in suppressed_ids(self.model.cfg)] if cfg.suppress_special else []
        ids += [[i] for i in cfg.suppress_tokens or []]
        ids += [list(s) for s in cfg.bad_words_ids or [] if list(s) != [self.model.cfg.eos_id]]
        return [[self.tgt_pieces[i] for i in seq] for seq in ids]

    def translate_ids(self, sources: list[list[int]], cfg: DecodingConfig, max_length: int) -> list[list[list[int]]]:
        """Per source, its n-best token ids (EOS appended where the hypothesis ended before the limit)."""
        results = self.translator.translate_batch([[self.src_tokens[i] for i in s] for s in sources],
                                                  **self.options(cfg, max_length))
        eos = self.model.cfg.eos_id
        return [[[self.tgt_index[t] for t in h] + ([eos] if len(h) < max_length else []) for h in r.hypotheses]
                for r in results]

    @torch.no_grad()
    def generate(self, model: Seq2SeqTransformer, src_ids: torch.Tensor, src_pad_mask: torch.Tensor,
                 cfg: DecodingConfig, target_prefix: Any = None, constraints: Any = None) -> GenerateOutput:
        """`generate`'s output for a batch: (B, n, T) sequences, seqlab's scores and token log-probs."""
        if target_prefix is not None:
            raise ConfigError("engine=ctranslate2 scores a forced target prefix its own way (outside its length "
                              "normalization); use engine=seqlab for decoding.prefix_size or a target prefix")
        if constraints is not None:
            raise ConfigError("engine=ctranslate2 has no lexical constraints; use engine=seqlab for "
                              "decoding.constraints")
        limits = max_new_tokens(cfg, src_pad_mask, model.cfg.max_positions).tolist()
        sources = [row[~pad].tolist() for row, pad in zip(src_ids, src_pad_mask, strict=True)]
        nbest = self.translate_ids(sources, cfg, int(max(limits)))
        n = cfg.n_best
        flat = [h[:limit] for hyps, limit in zip(nbest, limits, strict=True)
                for h in (hyps + [hyps[-1]] * n)[:n]]  # an n-best list shorter than n repeats its last
        tgt, _ = pad_right(flat, model.cfg.pad_id)
        lengths = torch.tensor([len(h) for h in flat])
        rows = src_ids.repeat_interleave(n, 0), src_pad_mask.repeat_interleave(n, 0)
        lps = score(model, *rows, tgt.to(src_ids.device)) * (torch.arange(tgt.shape[1])[None] < lengths[:, None])
        total = lps.sum(-1)
        scores = normalized(total, lengths.float(), cfg.length_penalty) if cfg.method == "beam" else total
        b = src_ids.shape[0]
        return GenerateOutput(tgt.view(b, n, -1), scores.view(b, n), lps.view(b, n, -1), lengths.view(b, n))
