"""Building blocks of the Transformer: attention, feed-forward, residual, embeddings (positions: model/positions.py)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.model.cache import KVBuffer, StaticKV
from seqlab.model.config import AttentionKernel, DropoutKernel, ModelConfig
from seqlab.model.dropout import Dropout, dropout
from seqlab.model.packing import Packing
from seqlab.model.positions import AttentionPositions, Rotary, make_absolute, rotate
from seqlab.model.products import Linear, linear


def padding_to_attn_mask(pad_mask: Tensor) -> Tensor:
    """(B, S) bool, True at padding -> (B, 1, 1, S) bool, True where attention is allowed.

    A row that is all padding (an empty source) may attend to its first position,
    so softmax never sees only -inf and no NaN spreads through the batch.
    """
    allowed = ~pad_mask
    allowed[:, 0] |= pad_mask.all(dim=1)
    return allowed[:, None, None, :]


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention over `n_heads` heads (Vaswani et al. 2017, 3.2).

    Self-attention uses one fused (3d, d) projection for queries, keys and values;
    cross-attention projects queries alone and keys/values with one fused (2d, d)
    projection, so a decoder computes memory keys/values once per source.
    """

    def __init__(self, cfg: ModelConfig, cross: bool) -> None:
        super().__init__()
        d, a, bias = cfg.d_model, cfg.attention_dim, cfg.bias  # a = n_heads * d_head, d_model unless set apart
        kv, in_bias = cfg.kv_dim, cfg.projection_bias  # kv = kv_heads * d_head (grouped-query attention)
        self.n_heads, self.kv_heads, self.head_dim, self.cross = cfg.n_heads, cfg.key_value_heads, cfg.head_dim, cross
        self.scale = cfg.attention_scale  # None: 1/sqrt(d_head)
        self.softcap = cfg.attn_softcap  # a soft cap on the logits: computed written out (SDPA has none)
        if cfg.qk_norm:  # Gemma 3: each head's queries and keys normalized before RoPE
            self.q_norm = RMSNorm(cfg.head_dim, cfg.layer_norm_eps)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.layer_norm_eps)
        self.dropout = cfg.attention_dropout
        self.kernel, self.dropout_kernel = cfg.attention_kernel, cfg.dropout_kernel
        self.split = (a, kv, kv)  # the fused projection's q, k, v blocks
        if cross:
            self.q_proj = Linear(d, a, bias=in_bias)
            self.kv_proj = Linear(d, 2 * kv, bias=in_bias)
        else:
            self.qkv_proj = Linear(d, a + 2 * kv, bias=in_bias)
        self.out_proj = Linear(a, d, bias=bias)
        self.recorder: list[Tensor] | None = None  # set by seqlab.inference.inspection to collect attention weights

    def split_heads(self, x: Tensor) -> Tensor:
        b, t, width = x.shape
        return x.view(b, t, width // self.head_dim, self.head_dim).transpose(1, 2)  # (B, H or KV heads, T, Dh)

    def shared_heads(self, x: Tensor) -> Tensor:
        """(B, KV, S, Dh) keys or values -> (B, H, S, Dh): each key/value head serves H / KV query heads in turn
        (Hugging Face's `repeat_kv`); the same tensor under multi-head attention."""
        repeats = self.n_heads // self.kv_heads
        return x if repeats == 1 else x.repeat_interleave(repeats, dim=1)

    def memory_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of the encoder output, each (B, H, S, Dh), contiguous.

        Contiguous once here rather than at every use: the heads are strided views of the projection,
        and each decoding step's batched matmul (fused kernel or not) would otherwise copy them all
        again, which took a third of greedy decoding's time at the bench shape.
        """
        k, v = self.kv_proj(memory).chunk(2, dim=-1)
        return self.split_heads(k).contiguous(), self.split_heads(v).contiguous()

    def forward(
        self,
        x: Tensor,  # (B, T, d)
        attn_mask: Tensor | None = None,  # broadcastable to (B, H, T, S); True = attend
        is_causal: bool = False,
        kv: tuple[Tensor, Tensor] | None = None,  # cross: the memory's keys/values, (B / group, H, S, Dh)
        cache: KVBuffer | StaticKV | None = None,  # self: the keys/values of earlier steps, extended in place
        group: int = 1,  # cross: consecutive rows sharing one source (beams)
        rotary: Rotary | None = None,  # self, RoPE: the angles of these T positions
        packing: Packing | None = None,  # self: x holds only the real tokens (R, d); the output too
    ) -> Tensor:
        if self.cross:
            q = self.split_heads(self.q_proj(x))  # (B, H, T, Dh)
            k, v = kv
        else:
            qkv = self.qkv_proj(x) if packing is None else packing.unpack(self.qkv_proj(x))  # (B, T, a + 2kv)
            q, k, v = (self.split_heads(t) for t in qkv.split(self.split, dim=-1))
            if hasattr(self, "q_norm"):
                q, k = self.q_norm(q), self.k_norm(k)
            if rotary is not None:  # keys are cached rotated, at their own positions
                q, k = rotate(q, rotary), rotate(k, rotary)
            if cache is not None:
                k, v = cache.append(k, v)  # (B, KV, T_past + T, Dh): the cache keeps the shared heads once
        b, h, t, dh = q.shape
        if self.recorder is not None:
            self.recorder.append(attention_weights(q, self.shared_heads(k), attn_mask, is_causal, group, self.scale))
        shared = self.kv_heads != h and group == 1 and not is_causal  # grouped-query: fold, not copy, the heads
        if shared:
            q, attn_mask = fold_heads(q, attn_mask, self.kv_heads)  # (B, KV, H/KV * T, Dh)
        else:
            k, v = self.shared_heads(k), self.shared_heads(v)  # (B, H, S, Dh)
        if group > 1:  # one source's beams form one group of queries over its keys: (G, H, K*T, Dh)
            q = q.view(b // group, group, h, t, dh).transpose(1, 2).reshape(b // group, h, group * t, dh)
        p_drop = self.dropout if self.training else 0.0
        if uses_math_attention(self.kernel, q, t) or self.softcap is not None:
            out = math_attention(q, k, v, attn_mask, is_causal, p_drop, self.dropout_kernel, self.scale, self.softcap)
        else:
            if attn_mask is not None and attn_mask.is_floating_point():
                attn_mask = attn_mask.to(q.dtype)  # a position bias: SDPA takes a float mask in the queries' type
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, dropout_p=p_drop,
                                                 scale=self.scale)
        if group > 1:
            out = out.view(b // group, h, group, t, dh).transpose(1, 2).reshape(b, h, t, dh)
        if shared:
            out = out.reshape(b, h, t, dh)  # (B, KV, H/KV * T, Dh) is (B, H, T, Dh) in memory order
        out = out.transpose(1, 2).reshape(b, t, h * dh)  # (B, T, d)
        return self.out_proj(out if packing is None else packing.pack(out))


def fold_heads(q: Tensor, mask: Tensor | None, kv_heads: int) -> tuple[Tensor, Tensor | None]:
    """Grouped-query attention without copying keys and values: the H / KV query heads that share a key/value
    head become one longer run of queries over it, (B, H, T, Dh) -> (B, KV, H/KV * T, Dh), query head j of
    group i at rows j*T..j*T+T-1; the mask (B or 1, 1 or H, T, S) follows. The same numbers as repeating each
    key/value head (Hugging Face's `repeat_kv`), read in place."""
    b, h, t, dh = q.shape
    g = h // kv_heads
    q = q.reshape(b, kv_heads, g * t, dh)
    if mask is None or (mask.shape[1] == 1 and mask.shape[2] == 1):
        return q, mask  # broadcasts over every query row
    if mask.shape[1] == 1:
        return q, mask.repeat(1, 1, g, 1)  # (B, 1, g * T, S)
    return q, mask.reshape(mask.shape[0], kv_heads, g * mask.shape[2], mask.shape[3])  # per head: (B, KV, g*T, S)


def uses_math_attention(kernel: AttentionKernel, q: Tensor, queries: int) -> bool:
    """Whether attention runs as `math_attention` rather than the fused kernel; `queries` per row.

    "auto" writes it out on a CPU in bf16, where the fused CPU kernel is several times slower at these
    shapes, and for a decoding step (one query per row), where there is too little work per head for
    the fused kernel's blocking: it took a quarter of fp32 beam search, 1.2x the written-out time
    (docs/performance.md). Training and encoding in fp32 keep the fused kernel.
    """
    if kernel != "auto":
        return kernel == "math"
    return q.device.type == "cpu" and (q.dtype != torch.float32 or queries == 1)


def causal_mask(n_new: int, n_past: int, device: torch.device) -> Tensor:
    """(T_new, T_past + T_new) bool: new position i may see keys up to n_past + i (the one causal mask: a
    decoder step over a cache, and with n_past = 0 SDPA's `is_causal`)."""
    q = torch.arange(n_new, device=device)[:, None] + n_past
    k = torch.arange(n_past + n_new, device=device)[None, :]
    return k <= q


def token_positions(valid: Tensor) -> Tensor:
    """(B, L) bool, True at real tokens -> (B, L) long positions: each token counts the real ones before it
    (padding gets the position of the token before it, or 0; padding is never attended to)."""
    return (valid.long().cumsum(-1) - 1).clamp(min=0)


def stack_mask(valid_keys: Tensor, queries: int, past: int, source: int, prefix_lm: bool) -> Tensor:
    """(B, 1, T, L) bool, True = attend: the T new tokens (at sequence indices past..past+T-1) over all L keys,
    causally and never to padding; a prefix LM's source tokens (indices < `source`) also see the source after
    them. Every token sees itself, so a padding query has a key to attend to (its output is never read)."""
    length = valid_keys.shape[1]
    q = torch.arange(past, past + queries, device=valid_keys.device)[:, None]  # (T, 1)
    k = torch.arange(length, device=valid_keys.device)[None, :]  # (1, L)
    allowed = k <= q
    if prefix_lm:
        allowed = allowed | ((q < source) & (k < source))
    return ((allowed[None] & valid_keys[:, None, :]) | (k == q)[None])[:, None]  # (B, 1, T, L)


def per_token_attention(relative: nn.Module | None, valid: Tensor, positions: Tensor, queries: int, past: int,
                        source: int = 0, prefix_lm: bool = False) -> tuple[Tensor, AttentionPositions]:
    """Self-attention's mask and relative positions for the T = `queries` new tokens (sequence indices past..
    past+T-1) where each token has its own position (B, L) and `valid` (B, L) marks the real ones: `stack_mask`,
    a float mask holding the bias where the relative scheme (`relative`, None: absolute) has one. A one-stack
    model's padded prompts and a decoder cache with holes (speculative decoding) both read it."""
    mask = stack_mask(valid, queries, past, source, prefix_lm)
    attention = AttentionPositions() if relative is None else relative.rows(positions[:, past:], positions)
    if attention.bias is not None:
        mask = attention.bias.masked_fill(~mask, float("-inf"))
    return mask, attention


def logit_scale(q: Tensor, scale: float | None) -> float:
    """The factor on q.k: `scale`, or SDPA's default 1/sqrt(d_head) when it is None."""
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale


def math_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, is_causal: bool,
                   dropout_p: float, dropout_kernel: DropoutKernel = "auto", scale: float | None = None,
                   softcap: float | None = None) -> Tensor:
    """softmax(q k^T / sqrt(d_h)) v (or `scale` in place of 1/sqrt(d_h)), written out: what
    F.scaled_dot_product_attention computes.

    q (B, H, T, Dh); k, v (B, H, S, Dh); attn_mask broadcastable to (B, H, T, S), True = attend, or a float
    bias added to the scaled logits (-inf = masked), as SDPA takes it.
    The softmax runs in fp32 whatever the input precision; dropout (on the weights, as SDPA's) draws
    its own mask. On CPUs in bf16 this is the faster path at seqlab's shapes: the fused CPU kernel's
    backward dominated a bf16 training step in a profile, and this one is plain GEMMs (docs/performance.md).
    """
    scores = (q @ k.transpose(-1, -2)) * logit_scale(q, scale)  # (B, H, T, S)
    if softcap is not None:  # Gemma 2: cap * tanh(scores / cap), before the mask
        scores = torch.tanh(scores / softcap) * softcap
    weights = torch.softmax(masked(scores.float(), attn_mask, is_causal), dim=-1).to(v.dtype)
    weights = dropout(weights, dropout_p, True, dropout_kernel)
    return weights @ v  # (B, H, T, Dh)


def attention_weights(q: Tensor, k: Tensor, attn_mask: Tensor | None, is_causal: bool, group: int,
                      scale: float | None = None) -> Tensor:
    """softmax(q k^T / sqrt(d_h)) (or `scale`) with the same masks as the fused kernel, (B, H, T, S) in fp32.

    Computed only for inspection and coverage penalties, beside (never instead of) the fused attention, so
    asking for the weights leaves the model's outputs bitwise unchanged. group > 1: consecutive rows of q
    share one row of k and of the mask (a source's beams).
    """
    qf, kf = q.float(), k.float()
    if group > 1:
        b, h, t, dh = q.shape
        scores = (qf.view(b // group, group, h, t, dh) @ kf[:, None].transpose(-1, -2)).view(b, h, t, -1)
        if attn_mask is not None and attn_mask.shape[0] > 1:
            attn_mask = attn_mask.repeat_interleave(group, dim=0)
    else:
        scores = qf @ kf.transpose(-1, -2)  # (B, H, T, S)
    return torch.softmax(masked(scores * logit_scale(q, scale), attn_mask, is_causal), dim=-1)


def masked(scores: Tensor, attn_mask: Tensor | None, is_causal: bool) -> Tensor:
    """Scores (B, H, T, S) with the attention mask applied as SDPA applies it: a bool mask (True = attend)
    sets the rest to -inf, a float one is added; `is_causal` masks keys after each query (top-left)."""
    if is_causal:
        attn_mask = causal_mask(scores.shape[-2], scores.shape[-1] - scores.shape[-2], scores.device)
    if attn_mask is None:
        return scores
    if attn_mask.is_floating_point():
        return scores + attn_mask.to(scores.dtype)
    return scores.masked_fill(~attn_mask, float("-inf"))


def gelu_tanh(x: Tensor) -> Tensor:
    """GELU's tanh approximation (Hendrycks & Gimpel 2016), Hugging Face's `gelu_new`."""
    return F.gelu(x, approximate="tanh")


ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": gelu_tanh,
                                                      "silu": F.silu}


class FeedForward(nn.Module):
    """Position-wise FFN(x) = W2 act(W1 x + b1) + b2 (Vaswani et al. 2017, 3.3), or gated (Shazeer 2020):
    W2 (act(x W_gate) * (x W_up)), with W_gate and W_up fused into fc1 as its first and second halves."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gated = cfg.gated_ffn
        self.fc1 = Linear(cfg.d_model, 2 * cfg.d_ff if self.gated else cfg.d_ff, bias=cfg.bias)
        self.fc2 = Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias)
        self.act = ACTIVATIONS[cfg.activation]
        self.dropout = Dropout(cfg.activation_dropout, cfg.dropout_kernel)

    def forward(self, x: Tensor) -> Tensor:
        if self.gated:
            gate, up = self.gate_and_up(x)  # (B, T, f) each
            return self.fc2(self.dropout(self.act(gate) * up))
        return self.fc2(self.dropout(self.act(self.fc1(x))))

    def gate_and_up(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x W_gate and x W_up. Training takes them as one product and two views of it; inference (no
        gradients: a decoding step of a few rows) as two products over the halves of fc1's weight, each output
        contiguous, which decodes SmolLM-135M's shape about 5% faster on a CPU than the one product whose halves
        the activation then reads strided (the same weights: checkpoints are unchanged). One row takes the one
        product through fc1's own forward: its halves are contiguous anyway, and fc1's `one_row` way (tuned per
        shape by model.one_row) then covers the whole weight in one pass. An engine's own fc1 (packed or int8,
        not an nn.Linear) keeps its one product."""
        if torch.is_grad_enabled() or not isinstance(self.fc1, nn.Linear) or x.numel() == x.shape[-1]:
            return self.fc1(x).chunk(2, dim=-1)
        f = self.fc1.out_features // 2
        w, b = self.fc1.weight, self.fc1.bias
        return (linear(x, w[:f], None if b is None else b[:f]), linear(x, w[f:], None if b is None else b[f:]))


def identity(x: Tensor) -> Tensor:
    return x


def replace_layers(model: nn.Module, kind: type[nn.Module], make: Callable[[nn.Module], nn.Module]) -> None:
    """In place: every submodule of type `kind` becomes make(submodule); a replaced one is not searched."""
    for name, child in model.named_children():
        if isinstance(child, kind):
            setattr(model, name, make(child))
        else:
            replace_layers(child, kind, make)


def fuse_relu(model: nn.Module, fused: Callable[[nn.Module], nn.Module]) -> None:
    """In place, for inference: each FeedForward with a ReLU gets fc1 = fused(fc1), a layer that applies the
    ReLU itself (one pass fewer over the (rows, d_ff) activations), and no separate activation."""
    for module in model.modules():
        if isinstance(module, FeedForward) and module.act is F.relu and not module.gated:
            module.fc1, module.act = fused(module.fc1), identity


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * g: no mean subtracted, no bias (Zhang & Sennrich 2019), as T5 computes it:
    the mean square in fp32, the result cast back to the weight's type when that is half precision."""

    def __init__(self, d: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            x = x.to(self.weight.dtype)
        return self.weight * x


def make_norm(cfg: ModelConfig) -> nn.Module:
    """The one place where `norm` becomes a class."""
    if cfg.norm == "rmsnorm":
        return RMSNorm(cfg.d_model, cfg.layer_norm_eps)
    return nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)


class Residual(nn.Module):
    """A sublayer f inside its residual connection, the Annotated Transformer's `sublayer(x, f)`.

    post (Vaswani et al. 2017): x = LN(x + dropout(f(x)));
    pre (Xiong et al. 2020, fairseq's normalize_before): x = x + dropout(f(LN(x))).
    sandwich (Ding et al. 2021; Gemma 2/3, `sandwich_norm`): x = x + dropout(LN'(f(LN(x)))).
    This is the one place where `norm_position` takes effect.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.pre = cfg.norm_position == "pre"
        self.norm = make_norm(cfg)
        self.post_norm = make_norm(cfg) if cfg.sandwich_norm else None  # Gemma's norm of the sublayer's output
        self.dropout = Dropout(cfg.dropout, cfg.dropout_kernel)

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.post_norm is not None:  # sandwich: x + dropout(LN'(f(LN(x))))
            return x + self.dropout(self.post_norm(sublayer(self.norm(x))))
        if self.pre:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class Embedder(nn.Module):
    """Token embedding (optionally scaled by sqrt(d)) + an absolute position table [+ LayerNorm] + dropout.

    The embedding scale (`scale_embedding`) is applied under every position scheme."""

    def __init__(self, cfg: ModelConfig, tokens: nn.Embedding) -> None:
        super().__init__()
        self.tokens = tokens
        self.positions = make_absolute(cfg)  # None: positions act inside self-attention (or there are none)
        self.scale = math.sqrt(cfg.d_model) if cfg.scale_embedding else 1.0
        self.norm = make_norm(cfg) if cfg.layernorm_embedding else None
        self.dropout = Dropout(cfg.dropout, cfg.dropout_kernel)
        self.max_positions = cfg.max_positions

    def forward(self, ids: Tensor, start: int | Tensor = 0, positions: Tensor | None = None) -> Tensor:
        """ids (B, T) at positions start..start+T-1; a (1,) tensor `start` is one step's position held on the
        device (T = 1, its bound checked by the caller: a captured step cannot raise); `positions` (B, T):
        each token's own position instead (a one-stack model's padded sequences, checked by the caller)."""
        if positions is not None:
            x = self.tokens(ids) * self.scale  # (B, T, d)
            if self.positions is not None:
                x = x + self.positions.rows(positions)
            return self.dropout(self.norm(x) if self.norm is not None else x)
        length = ids.shape[1]
        if isinstance(start, int) and start + length > self.max_positions:
            raise ValueError(
                f"sequence of {start + length} tokens exceeds model.max_positions={self.max_positions}; "
                "truncate inputs or build the model with a larger max_positions"
            )
        x = self.tokens(ids) * self.scale  # (B, T, d)
        if self.positions is not None:
            x = x + (self.positions(start, length) if isinstance(start, int) else self.positions.at(start))
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x)
