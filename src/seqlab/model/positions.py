"""Where a Transformer learns token order: an absolute table added to the embeddings, or a relative scheme
inside self-attention.

Absolute (`model.positions`): `sinusoidal` (Vaswani et al. 2017) and `learned` (Gehring et al. 2017) add one
vector per position to the token embeddings of each stack.

Relative: the embeddings carry no position, and every self-attention layer of a stack sees positions through
the same per-stack module, computed once per forward pass (`AttentionPositions`). Cross-attention gets none:
a target position has no distance to a source position.
- `rope` (Su et al. 2021): queries and keys rotated by angle m * theta_i at position m, theta_i =
  base^(-2i / rotary_dim), so q_m . k_n depends on m - n alone. Layout: rotate-half (GPT-NeoX, Hugging Face's
  `apply_rotary_pos_emb`): dimension i pairs with i + rotary_dim / 2, not with its neighbour (the paper's and
  GPT-J's interleaved form; the two are one fixed permutation of the head's dimensions apart). The first
  `rotary_dim` dimensions of each head are rotated, the rest pass through.
- `alibi` (Press et al. 2022): a bias -slope_h x |i - j| on the attention logits, one fixed slope per head.
  The paper defines it for causal attention, where j <= i and |i - j| = i - j; the encoder uses the same
  symmetric form over all keys.
- `t5` (Raffel et al. 2020): a learned scalar per head and bucket of the relative distance j - i, exact up
  to `t5_buckets / 4` and logarithmic up to `t5_max_distance`; bidirectional buckets (the sign kept) in the
  encoder, causal ones in the decoder; one table per stack, shared by its layers, as T5 does. The bias is
  added after the logit scale; T5 itself has none (`model.scale_attention=false`).
- `none`: no position information (a bag of tokens in the encoder; the decoder's causal mask still orders
  it).

Right padding moves no real token's position, and padded keys are masked before the softmax, so a padded
batch gives each sentence its own result under every scheme. A one-stack model (model.causal) reads source
and target as one sequence with the source's padding inside it: each token's position counts the real
tokens before it (Hugging Face's `attention_mask.cumsum(-1) - 1`), and each scheme's `rows` computes from
those per-row positions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.model.config import ModelConfig

Rotary = tuple[Tensor, Tensor]  # cos, sin: (T, rotary_dim / 2) each, for the queries' positions


@dataclass
class AttentionPositions:
    """What one stack's self-attention layers need for a span of query positions: rotation angles (RoPE) or an
    additive logit bias (ALiBi, T5), or neither."""

    rotary: Rotary | None = None
    bias: Tensor | None = None  # (1, H, T, S) float, added to q.k / sqrt(d_head)


def sinusoid_table(n_positions: int, dim: int) -> Tensor:
    """The paper's fixed encoding, PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(...).

    Departure from the paper, layout only: the sines fill the first half of the
    vector and the cosines the second (as Marian and fairseq do) rather than
    alternating. The set of frequencies is the paper's; a fixed permutation of
    dimensions makes no difference to a model trained from scratch, and this
    layout lets pretrained Marian models load unchanged.
    """
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]
    inv_freq = torch.pow(10000.0, -torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = pos * inv_freq  # (P, d/2)
    return torch.cat([angles.sin(), angles.cos()], dim=1).float()  # (P, d)


def fairseq_sinusoid_table(n_positions: int, dim: int, pad_row: int | None) -> Tensor:
    """fairseq's (and tensor2tensor's) table, as M2M100 and NLLB use it: frequencies 10000^(-i / (d/2 - 1)),
    sines then cosines, computed in fp32 as fairseq does, the padding id's row zeroed. fairseq numbers real
    tokens' positions from pad_id + 1 (`model.position_offset`), so the zeroed row is never read for them."""
    half = dim // 2
    step = math.log(10000) / (half - 1)
    inv_freq = torch.exp(torch.arange(half, dtype=torch.int64).float() * -step)
    angles = torch.arange(n_positions, dtype=torch.int64).float()[:, None] * inv_freq[None, :]  # (P, d/2)
    table = torch.cat([angles.sin(), angles.cos()], dim=1)  # (P, d)
    if pad_row is not None and pad_row < n_positions:
        table[pad_row] = 0
    return table


class SinusoidalPositions(nn.Module):
    """Fixed positional encodings, a buffer (not a parameter, not saved); position p reads row p + offset."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        rows, self.offset = cfg.position_rows, cfg.position_offset
        table = (fairseq_sinusoid_table(rows, cfg.d_model, cfg.pad_id if cfg.position_offset else None)
                 if cfg.sinusoid_layout == "fairseq" else sinusoid_table(rows, cfg.d_model))
        self.register_buffer("table", table, persistent=False)

    def forward(self, start: int, length: int) -> Tensor:
        return self.table[self.offset + start : self.offset + start + length]  # (T, d)

    def at(self, position: Tensor) -> Tensor:
        """(1, d): the row of `position`, a (1,) long tensor (a step whose position lives on the device)."""
        return self.table.index_select(0, position + self.offset)

    def rows(self, positions: Tensor) -> Tensor:
        """(B, T, d): the rows of per-token positions (B, T) (a one-stack model's padded prompts)."""
        return self.table[positions + self.offset]


class LearnedPositions(nn.Module):
    """One learned vector per position (Gehring et al. 2017); position p reads row p + offset (BART keeps two
    unused rows before the first position)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.offset = cfg.position_offset
        self.weight = nn.Parameter(torch.empty(cfg.position_rows, cfg.d_model))

    @torch.no_grad()
    def reset_parameters(self, init: str = "small") -> None:
        """small: N(0, d^-1/2), fairseq's; unit: N(0, 1), the scale of the scaled token embeddings; sinusoid:
        the sinusoid table (Marian layout), trained from there."""
        d = self.weight.shape[1]
        if init == "sinusoid":
            self.weight.copy_(sinusoid_table(self.weight.shape[0], d))
        else:
            nn.init.normal_(self.weight, mean=0.0, std=1.0 if init == "unit" else d**-0.5)

    def forward(self, start: int, length: int) -> Tensor:
        return self.weight[self.offset + start : self.offset + start + length]  # (T, d)

    def at(self, position: Tensor) -> Tensor:
        """(1, d): the row of `position`, a (1,) long tensor (a step whose position lives on the device)."""
        return self.weight.index_select(0, position + self.offset)

    def rows(self, positions: Tensor) -> Tensor:
        """(B, T, d): the rows of per-token positions (B, T) (a one-stack model's padded prompts). Looked up as an
        embedding: its gradient sums each row's tokens in a fixed order, where advanced indexing's accumulates
        them in a thread-dependent one on a CPU (two identical runs would differ)."""
        return F.embedding(positions + self.offset, self.weight)


def make_absolute(cfg: ModelConfig) -> nn.Module | None:
    """The table the embedder adds, or None for a relative scheme (or none)."""
    kinds = {"sinusoidal": SinusoidalPositions, "learned": LearnedPositions}
    return kinds[cfg.positions](cfg) if cfg.positions in kinds else None


def rotate(x: Tensor, rotary: Rotary) -> Tensor:
    """x (B, H, T, Dh) with its first rotary_dim dimensions rotated, rotate-half layout: (x1, x2) ->
    (x1 cos - x2 sin, x2 cos + x1 sin) for the halves x1, x2 of those dimensions."""
    cos, sin = rotary  # (T, R/2)
    r = 2 * cos.shape[-1]
    x1, x2, rest = x[..., : r // 2], x[..., r // 2 : r], x[..., r:]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


class RotaryPositions(nn.Module):
    """RoPE's angles m * theta_i for a span of positions m (Su et al. 2021)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        dim = cfg.rotary_dim
        inv_freq = torch.pow(cfg.rotary_base, -torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # (R/2,), fp64: angles exact to fp32

    def forward(self, start: int | Tensor, queries: int, keys: int) -> AttentionPositions:
        pos = query_positions(start, queries, self.inv_freq.device).double()
        angles = pos[:, None] * self.inv_freq  # (T, R/2)
        return AttentionPositions(rotary=(angles.cos().float(), angles.sin().float()))

    def rows(self, q_pos: Tensor, k_pos: Tensor) -> AttentionPositions:
        """Per-row query positions (B, T): angles (B, 1, T, R/2), broadcast over the heads."""
        angles = q_pos.double()[:, None, :, None] * self.inv_freq
        return AttentionPositions(rotary=(angles.cos().float(), angles.sin().float()))


def alibi_slopes(n_heads: int) -> list[float]:
    """Press et al. (2022): for 2^k heads the geometric sequence starting and stepping at 2^(-8 / 2^k); for
    other counts, the slopes of the next lower power of two, then every other slope of twice that many."""
    def geometric(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if n_heads & (n_heads - 1) == 0:
        return geometric(n_heads)
    lower = 2 ** math.floor(math.log2(n_heads))
    return geometric(lower) + alibi_slopes(2 * lower)[0::2][: n_heads - lower]


def query_positions(start: int | Tensor, queries: int, device: torch.device) -> Tensor:
    """(T,) long: the queries' positions start..start+T-1; a (1,) tensor `start` is one step's position held on
    the device (T = 1), which a captured decoder step reads without a host value (engines.graphs)."""
    if isinstance(start, Tensor):
        return start
    return torch.arange(start, start + queries, device=device)


def distances(start: int | Tensor, queries: int, keys: int, device: torch.device) -> Tensor:
    """(T, S) key position minus query position, queries at start..start+T-1 (`query_positions`), keys at 0..S-1."""
    q = query_positions(start, queries, device)[:, None]
    return torch.arange(keys, device=device)[None, :] - q


class ALiBiPositions(nn.Module):
    """The bias -slope_h x |i - j| (Press et al. 2022; symmetric in the encoder, see the module docstring)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.register_buffer("slopes", torch.tensor(alibi_slopes(cfg.n_heads)), persistent=False)  # (H,)

    def forward(self, start: int | Tensor, queries: int, keys: int) -> AttentionPositions:
        rel = distances(start, queries, keys, self.slopes.device).abs().float()  # (T, S)
        return AttentionPositions(bias=(-self.slopes[:, None, None] * rel)[None])  # (1, H, T, S)

    def rows(self, q_pos: Tensor, k_pos: Tensor) -> AttentionPositions:
        """Per-row positions of queries (B, T) and keys (B, S): the bias (B, H, T, S)."""
        rel = (k_pos[:, None, :] - q_pos[:, :, None]).abs().float()  # (B, T, S)
        return AttentionPositions(bias=-self.slopes[None, :, None, None] * rel[:, None])


def t5_bucket(relative: Tensor, bidirectional: bool, buckets: int, max_distance: int) -> Tensor:
    """T5's bucket of each relative position (key minus query): half the buckets per sign when bidirectional;
    of those, the first half exact distances, the rest logarithmic up to max_distance, beyond which all share
    the last bucket. Causal: only distances to earlier keys count (later ones share bucket 0)."""
    out = torch.zeros_like(relative)
    if bidirectional:
        buckets //= 2
        out += (relative > 0).long() * buckets
        distance = relative.abs()
    else:
        distance = (-relative).clamp(min=0)
    exact = buckets // 2
    far = exact + (torch.log(distance.float() / exact) / math.log(max_distance / exact)
                   * (buckets - exact)).long()  # log(0) -> -inf only where distance < exact, not taken
    far = far.clamp(max=buckets - 1)
    return out + torch.where(distance < exact, distance, far)


class T5Positions(nn.Module):
    """T5's learned bias per head and relative-position bucket (Raffel et al. 2020), one table per stack."""

    def __init__(self, cfg: ModelConfig, causal: bool) -> None:
        super().__init__()
        self.bidirectional = not causal
        self.buckets, self.max_distance = cfg.relative_buckets, cfg.relative_max_distance
        self.bias = nn.Embedding(self.buckets, cfg.n_heads)

    def forward(self, start: int | Tensor, queries: int, keys: int) -> AttentionPositions:
        rel = distances(start, queries, keys, self.bias.weight.device)
        bucket = t5_bucket(rel, self.bidirectional, self.buckets, self.max_distance)  # (T, S)
        return AttentionPositions(bias=self.bias(bucket).permute(2, 0, 1)[None].float())  # (1, H, T, S)

    def rows(self, q_pos: Tensor, k_pos: Tensor) -> AttentionPositions:
        """Per-row positions of queries (B, T) and keys (B, S): the bias (B, H, T, S)."""
        bucket = t5_bucket(k_pos[:, None, :] - q_pos[:, :, None], self.bidirectional, self.buckets,
                           self.max_distance)  # (B, T, S)
        return AttentionPositions(bias=self.bias(bucket).permute(0, 3, 1, 2).float())


class NoPositions(nn.Module):
    """No position information at all."""

    def forward(self, start: int | Tensor, queries: int, keys: int) -> AttentionPositions:
        return AttentionPositions()

    def rows(self, q_pos: Tensor, k_pos: Tensor) -> AttentionPositions:
        return AttentionPositions()


def make_relative(cfg: ModelConfig, causal: bool) -> nn.Module | None:
    """The one place where a relative `positions` becomes a class: one module per stack (`causal`: the
    decoder's); None for an absolute table, which the embedder adds instead."""
    if cfg.positions == "rope":
        return RotaryPositions(cfg)
    if cfg.positions == "alibi":
        return ALiBiPositions(cfg)
    if cfg.positions == "t5":
        return T5Positions(cfg, causal)
    if cfg.positions == "none":
        return NoPositions()
    return None
