"""Parameter counts: counted from a built model, and from the analytic formula.

Per layer, with d = d_model, f = d_ff and a = n_heads * d_head (= d unless d_head is set), biases on every
projection:
  attention      4da + 3a + d       (q, k, v: d -> a; out: a -> d)     = 4d^2 + 4d when a = d
                 (grouped-query: k, v: d -> kv = kv_heads * d_head, 2da + 2d kv + a + 2kv + d)
  feed-forward   2df + f + d        gated: 3df + 2f + d (W_gate, W_up, W2)
  LayerNorm      2d                 (gain and bias; RMSNorm: d, gain only)
  encoder layer  4d^2 + 2df + f + 9d      = 12d^2 + 13d when f = 4d
  decoder layer  8d^2 + 2df + f + 15d     = 16d^2 + 19d when f = 4d
Without biases (`bias=false`) the 3a + d and f + d (2f + d gated) terms drop.
Embeddings: |V|d per distinct matrix (1, 2 or 3 by tying; `inputs` ties the two input tables and keeps
its own output matrix), plus learned positions 2(P + offset)d or T5's relative bias 2 x buckets x heads
(one table per stack), a norm on embeddings 2 x norm, final norms 2 x norm, output bias |V_tgt|,
copy attention 2d^2 + 3d + 1 (query, key, gate).
A decoder-only or prefix LM is one stack of encoder-sized layers (self-attention and feed-forward), one
token table (two untied), one position table, one final norm.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from torch import Tensor, nn

from seqlab.model.config import ModelConfig


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts by component; shared tensors are counted once."""

    embeddings: int
    positions: int
    encoder: int
    decoder: int
    norms: int
    output: int
    copy: int

    @property
    def total(self) -> int:
        return sum(getattr(self, f.name) for f in fields(self))

    def rows(self) -> list[tuple[str, int]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self)] + [("total", self.total)]


def analytic_counts(cfg: ModelConfig) -> ParamCounts:
    """The standard closed-form count for `cfg`."""
    d, f, a, kv = cfg.d_model, cfg.d_ff, cfg.attention_dim, cfg.kv_dim
    v_src, v_tgt = cfg.src_vocab_size, cfg.target_vocab_size
    b = 1 if cfg.bias else 0
    attention = 2 * d * a + 2 * d * kv + (a + 2 * kv if cfg.projection_bias else 0) + b * d
    ffn = (3 * d * f + b * (2 * f + d)) if cfg.gated_ffn else (2 * d * f + b * (f + d))
    norm = 2 * d if cfg.norm == "layernorm" else d
    if cfg.one_stack:  # one table (and a head of its own unless tied), one stack, one final norm
        return ParamCounts(
            embeddings=v_src * d * (1 if cfg.tie_embeddings in ("all", "decoder") else 2),
            positions={"learned": cfg.position_rows * d, "t5": cfg.relative_buckets * cfg.n_heads}.get(
                cfg.positions, 0),
            encoder=0, decoder=cfg.decoder_layers * (attention + ffn + 2 * norm),
            norms=(norm if cfg.layernorm_embedding else 0) + (norm if cfg.use_final_norm else 0),
            output=v_tgt if cfg.output_bias else 0, copy=0)
    matrices = {"none": v_src * d + 2 * v_tgt * d, "decoder": (v_src + v_tgt) * d, "all": v_src * d,
                "inputs": (v_src + v_tgt) * d}
    return ParamCounts(
        embeddings=matrices[cfg.tie_embeddings],
        positions={"learned": 2 * cfg.position_rows * d,
                   "t5": 2 * cfg.relative_buckets * cfg.n_heads}.get(cfg.positions, 0),
        encoder=cfg.encoder_layers * (attention + ffn + 2 * norm),
        decoder=cfg.decoder_layers * (2 * attention + ffn + 3 * norm),
        norms=(2 * norm if cfg.layernorm_embedding else 0) + (2 * norm if cfg.use_final_norm else 0),
        output=v_tgt if cfg.output_bias else 0,
        copy=2 * d * d + 3 * d + 1 if cfg.copy_attention else 0,
    )


def equal_parameter_stack(cfg: ModelConfig, architecture: str) -> ModelConfig:
    """A one-stack model (`decoder_only` or `prefix_lm`) of cfg's encoder-decoder's layers in one stack, its
    feed-forward width chosen so that its layers hold as many parameters as the encoder's and decoder's
    together (the nearest integer d_ff; every other field as in cfg): Raffel et al.'s and Zhang et al.'s
    comparison at equal parameters. The embeddings are not matched (one table against cfg's tying)."""
    from dataclasses import replace

    layers = cfg.encoder_layers + cfg.decoder_layers
    target = analytic_counts(cfg)
    stack = replace(cfg, architecture=architecture, encoder_layers=0, decoder_layers=layers)
    at = {f: analytic_counts(replace(stack, d_ff=f)).decoder for f in (1, 2)}
    per_unit = at[2] - at[1]  # the stack's parameters per unit of d_ff
    d_ff = round((target.encoder + target.decoder - at[1]) / per_unit) + 1
    return replace(stack, d_ff=d_ff)


def count_parameters(model: nn.Module) -> ParamCounts:
    """Count a built Seq2SeqTransformer's parameters by component (shared storage once)."""
    seen: set[int] = set()

    def count(*tensors: Tensor) -> int:
        total = 0
        for t in tensors:
            if id(t) not in seen:
                seen.add(id(t))
                total += t.numel()
        return total

    def params(*modules: nn.Module | None) -> list[Tensor]:
        return [p for m in modules if m is not None for p in m.parameters()]

    embed, output = model.src_embed, model.output
    counts = ParamCounts(
        embeddings=count(embed.tokens.weight, model.tgt_embed.tokens.weight, output.weight),
        positions=count(*params(embed.positions, model.tgt_embed.positions, model.encoder_positions,
                                model.decoder_positions)),
        encoder=count(*params(model.encoder_layers)),
        decoder=count(*params(model.decoder_layers)),
        norms=count(*params(embed.norm, model.tgt_embed.norm, model.encoder_norm, model.decoder_norm)),
        output=count(*params(output)),
        copy=count(*params(model.pointer)),
    )
    if counts.total != sum(p.numel() for p in model.parameters()):
        raise RuntimeError("count_parameters missed a parameter; update it with the model")
    return counts


def param_table(cfg: ModelConfig, counted: ParamCounts | None = None) -> str:
    """A plain-text table of analytic (and, if given, counted) parameters."""
    analytic = analytic_counts(cfg)
    lines = [f"{'component':<12}{'analytic':>14}" + (f"{'counted':>14}" if counted else "")]
    for (name, a), (_, c) in zip(analytic.rows(), (counted or analytic).rows(), strict=True):
        lines.append(f"{name:<12}{a:>14,}" + (f"{c:>14,}" if counted else ""))
    return "\n".join(lines)
