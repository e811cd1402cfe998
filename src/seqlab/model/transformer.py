"""Seq2SeqTransformer: encoder, decoder with an incremental cache, tied or untied embeddings."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from seqlab.model.cache import KV, DecoderCache, KVBuffer, StaticCache, StaticKV
from seqlab.model.config import ModelConfig
from seqlab.model.copy import CopySource, PointerGenerator
from seqlab.model.dropout import dropped_layers
from seqlab.model.layers import (
    Embedder,
    FeedForward,
    MultiHeadAttention,
    Residual,
    causal_mask,
    make_norm,
    padding_to_attn_mask,
    per_token_attention,
    token_positions,
)
from seqlab.model.layout import RowLayout
from seqlab.model.packing import Packing, at_real
from seqlab.model.positions import AttentionPositions, LearnedPositions, Rotary, make_relative
from seqlab.model.products import Linear


def encoder_packing(src_pad_mask: Tensor) -> Packing | None:
    """Where a padded batch's real source tokens sit, for an encoder at inference to compute its position-wise
    layers on them only (model.packing: at 20-40 tokens a source, a sixth to a third of the slots are padding).

    Not in training, whose batches are bucketed by length and whose compiled layers (train.levers) see one
    layout; nor for a batch holding an empty source, whose one attended slot (padding_to_attn_mask) is its
    encoded padding."""
    valid = ~src_pad_mask
    return Packing.of(valid) if bool(valid.any(1).all()) else None


class Checkpointable(nn.Module):
    """A layer that activation checkpointing can wrap (Chen et al. 2016, "Training deep nets with sublinear
    memory cost"): with `checkpointed` set (train.activation_checkpointing, `train.levers.checkpoint_layers`), a
    training forward keeps only the layer's inputs and recomputes its activations in the backward, under the
    same dropout masks (the RNG state is replayed), so the gradients are the plain step's. Inference (eval mode
    or no gradients) runs the plain forward. A flag, not a wrapper module: parameter names and checkpoints stay
    as they are, and a copy of the model is checkpointed as its original."""

    checkpointed = False

    def __call__(self, *args: object, **kwargs: object) -> Tensor:
        if self.checkpointed and self.training and torch.is_grad_enabled():
            return checkpoint(super().__call__, *args, use_reentrant=False, **kwargs)
        return super().__call__(*args, **kwargs)


class EncoderLayer(Checkpointable):
    """Self-attention then feed-forward, each inside a residual block (the encoder's layer, and a one-stack
    model's, whose self-attention extends a cache: model.causal)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg, cross=False)
        self.self_attn_res = Residual(cfg)
        self.ffn = FeedForward(cfg)
        self.ffn_res = Residual(cfg)

    def forward(self, x: Tensor, attn_mask: Tensor, rotary: Rotary | None = None,
                cache: KVBuffer | None = None, packing: Packing | None = None) -> Tensor:
        """x: (B, T, d), or its real tokens (R, d) where `packing` says where they sit."""
        x = self.self_attn_res(x, lambda h: self.self_attn(h, attn_mask, cache=cache, rotary=rotary,
                                                           packing=packing))
        return self.ffn_res(x, self.ffn)


class DecoderLayer(Checkpointable):
    """Masked self-attention, cross-attention over the encoder output, feed-forward."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg, cross=False)
        self.self_attn_res = Residual(cfg)
        self.cross_attn = MultiHeadAttention(cfg, cross=True)
        self.cross_attn_res = Residual(cfg)
        self.ffn = FeedForward(cfg)
        self.ffn_res = Residual(cfg)

    def forward(
        self, x: Tensor, self_mask: Tensor | None, is_causal: bool,
        cache: KVBuffer | None, cross_kv: KV | Tensor, cross_mask: Tensor, group: int = 1, rotary: Rotary | None = None,
    ) -> Tensor:
        """cross_kv: the encoder output's keys and values, or the encoder output (B, S, d) itself, whose keys and
        values this layer then projects in its own forward (teacher forcing: a wrapping unit, FSDP's, gathers
        its weights for that)."""
        if isinstance(cross_kv, Tensor):
            cross_kv = self.cross_attn.memory_kv(cross_kv)
        x = self.self_attn_res(x, lambda h: self.self_attn(h, self_mask, is_causal, cache=cache, rotary=rotary))
        x = self.cross_attn_res(x, lambda h: self.cross_attn(h, cross_mask, kv=cross_kv, group=group))
        return self.ffn_res(x, self.ffn)


def with_bias(mask: Tensor | None, is_causal: bool, positions: AttentionPositions) -> tuple[Tensor | None, bool]:
    """A self-attention mask with the positions' logit bias folded in: (mask, is_causal) unchanged without a
    bias, else a float mask (B or 1, H, T, S) holding the bias and -inf where `mask` (or causality) forbids."""
    bias = positions.bias
    if bias is None:
        return mask, is_causal
    if is_causal:
        mask = causal_mask(bias.shape[-2], 0, bias.device)  # (T, T)
    if mask is not None:
        bias = bias.masked_fill(~mask, float("-inf"))
    return bias, False


def initialize(model: nn.Module) -> None:
    """fairseq's initialization (Seq2SeqTransformer's docstring), for any model with seqlab's parts: the
    encoder-decoder and the one-stack models alike."""
    d = model.cfg.d_model
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=d**-0.5)
        elif isinstance(module, LearnedPositions):
            module.reset_parameters(model.cfg.position_init)
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            fused = module.kv_proj if module.cross else module.qkv_proj
            for block in fused.weight.split(module.split[1:] if module.cross else module.split, dim=0):
                nn.init.xavier_uniform_(block, gain=1 / math.sqrt(2))
            if module.cross:
                nn.init.xavier_uniform_(module.q_proj.weight, gain=1 / math.sqrt(2))
        elif isinstance(module, FeedForward) and module.gated:
            for half in module.fc1.weight.chunk(2, dim=0):
                nn.init.xavier_uniform_(half)
    nn.init.normal_(model.output.weight, mean=0.0, std=d**-0.5)
    with torch.no_grad():
        for emb in (model.src_embed.tokens, model.tgt_embed.tokens):
            emb.weight[model.cfg.pad_id].zero_()


class Seq2SeqTransformer(nn.Module):
    """Encoder-decoder Transformer (Vaswani et al. 2017) with the variants of ModelConfig.

    Initialization follows fairseq: Xavier-uniform projections (q/k/v blocks with
    gain 1/sqrt(2)), zero biases, token embeddings and an untied output projection
    drawn from N(0, d^-1/2) with the pad row zeroed, learned positions N(0, d^-1/2), T5's bias tables
    N(0, d^-1/2) (an nn.Embedding, as Hugging Face's T5 initializes them); `position_init` starts learned
    positions at N(0, 1) or at the sinusoid table instead.
    The same embedding init is used with and without `scale_embedding`, so the two
    variants differ in the multiplier alone. A gated feed-forward's two halves of fc1 are initialized as
    two layers. The pad row gets no gradient, except where the pad id also starts the decoder (T5), and so
    is a token the model reads.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        padding_idx = None if cfg.bos_id == cfg.pad_id else cfg.pad_id
        src_tokens = nn.Embedding(cfg.src_vocab_size, d, padding_idx=padding_idx)
        tgt_tokens = (
            src_tokens if cfg.tie_embeddings in ("all", "inputs")
            else nn.Embedding(cfg.target_vocab_size, d, padding_idx=padding_idx)
        )
        self.src_embed = Embedder(cfg, src_tokens)
        self.tgt_embed = Embedder(cfg, tgt_tokens)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        # relative positions: one module per stack, shared by its self-attention layers (None: absolute)
        self.encoder_positions = make_relative(cfg, causal=False)
        self.decoder_positions = make_relative(cfg, causal=True)
        final = cfg.use_final_norm
        self.encoder_norm = make_norm(cfg) if final else nn.Identity()
        self.decoder_norm = make_norm(cfg) if final else nn.Identity()
        self.output_scale = d**-0.5 if cfg.rescale_output else None  # T5 v1.0: the tied head reads h * d^-1/2
        self.output = Linear(d, cfg.target_vocab_size, bias=cfg.output_bias)
        self.pointer = PointerGenerator(cfg) if cfg.copy_attention else None
        self.reset_parameters()
        if cfg.tie_embeddings in ("all", "decoder"):
            self.output.weight = tgt_tokens.weight

    def reset_parameters(self) -> None:
        initialize(self)

    def encode(self, src_ids: Tensor, src_pad_mask: Tensor) -> Tensor:
        """(B, S) ids and (B, S) pad mask -> memory (B, S, d)."""
        x = self.src_embed(src_ids)
        positions = self.self_attention_positions(self.encoder_positions, 0, src_ids.shape[1])
        attn_mask, _ = with_bias(padding_to_attn_mask(src_pad_mask), False, positions)  # (B, 1 or H, 1 or S, S)
        packing = None if self.training else encoder_packing(src_pad_mask)
        if packing is not None:
            x = packing.pack(x)  # (R, d)
        skipped = dropped_layers(len(self.encoder_layers), self.cfg.encoder_layerdrop, self.training)
        for layer, skip in zip(self.encoder_layers, skipped, strict=True):
            if not skip:
                x = layer(x, attn_mask, positions.rotary, packing=packing)
        x = self.encoder_norm(x)
        return x if packing is None else packing.unpack(x)  # zeros at padding, which cross-attention never reads

    @staticmethod
    def self_attention_positions(module: nn.Module | None, start: int, queries: int) -> AttentionPositions:
        """What a stack's self-attention needs for queries at start..start+queries-1 over keys 0..start+queries-1."""
        return AttentionPositions() if module is None else module(start, queries, start + queries)

    def start_cache(self, memory: Tensor, src_pad_mask: Tensor, group: int = 1, capacity: int = 64,
                    src_ids: Tensor | None = None) -> DecoderCache:
        """An empty cache for decoding `group` rows per source (beams) with each layer's
        cross-attention keys/values of `memory` (G, S, d) computed once.
        A model with copy attention also needs the source ids (G, S).
        """
        cross_kv = tuple(layer.cross_attn.memory_kv(memory) for layer in self.decoder_layers)
        return DecoderCache(cross_kv, padding_to_attn_mask(src_pad_mask), group=group, capacity=capacity,
                            copy=self.copy_source(memory, src_ids))

    def copy_source(self, memory: Tensor, src_ids: Tensor | None) -> CopySource | None:
        """What copy attention needs from the sources; None for a model without it."""
        if self.pointer is None:
            return None
        if src_ids is None:
            raise ValueError("this model has copy attention: pass src_ids to decode/start_cache")
        return self.pointer.source(memory, src_ids)

    def decode(
        self,
        tgt_ids: Tensor,  # (B, T): the whole prefix, or only the new tokens when cache is given
        memory: Tensor | None,  # (B, S, d); may be None when cache is given
        src_pad_mask: Tensor | None,  # (B, S); may be None when cache is given
        cache: DecoderCache | None = None,
        src_ids: Tensor | None = None,  # (B, S); copy attention only, and only when cache is None
        states: list[Tensor] | None = None,  # if given, receives the decoder's output states (B, T, d)
    ) -> tuple[Tensor, DecoderCache | None]:
        """Decoder logits (B, T, V) (log-probabilities with copy attention).
        With a cache, extends it by T steps (in place) and returns it. `states` receives the last hidden
        states, after the final norm and before any output rescaling (what Hugging Face returns as the
        last of `decoder_hidden_states`; contrastive search compares them).
        """
        h, cache, (copy, cross_mask, group) = self._decoder(tgt_ids, memory, src_pad_mask, cache, src_ids)
        if states is not None:
            states.append(h)
        real = None if cache is None or cache.valid is None else cache.valid[:, -tgt_ids.shape[1]:]  # (B, T)
        logits = self.logits(h) if real is None else at_real(real, h, self.logits)  # (B, T, V)
        if self.pointer is not None:
            logits = self.pointer(h, logits, copy, cross_mask, group)
        return logits, cache

    def output_input(self, h: Tensor) -> Tensor:
        """What the output layer reads of the decoder's states h (B, T, d): h, or h * d^-1/2 (T5 v1.0)."""
        return h if self.output_scale is None else h * self.output_scale

    def logits(self, h: Tensor) -> Tensor:
        """The output layer on the decoder's states (..., d) -> (..., V)."""
        return self.output(self.output_input(h))

    def _decoder(self, tgt_ids: Tensor, memory: Tensor | None, src_pad_mask: Tensor | None,
                 cache: DecoderCache | None, src_ids: Tensor | None
                 ) -> tuple[Tensor, DecoderCache | None, tuple[CopySource | None, Tensor | None, int]]:
        """The decoder stack's final states (B, T, d), the cache, and what copy attention reads.

        Target padding needs no mask: it is on the right, and the causal mask
        already hides it from every real position.
        """
        if cache is None:
            cross_kv = [memory] * len(self.decoder_layers)  # each layer projects it (DecoderLayer.forward)
            cross_mask, group = padding_to_attn_mask(src_pad_mask), 1
            buffers: list[KVBuffer | None] = [None] * len(self.decoder_layers)
            start = 0
            copy = self.copy_source(memory, src_ids)
        else:
            cross_kv, cross_mask, group = cache.cross_kv, cache.cross_mask, cache.group
            buffers, start = cache.layers, cache.length
            copy = cache.copy
        n_new = tgt_ids.shape[1]
        if cache is not None and cache.valid is not None:
            h = self._ragged(tgt_ids, cache, start)
            return h, cache, (copy, cross_mask, group)
        if start == 0:
            self_mask, is_causal = None, n_new > 1
        else:
            self_mask = None if n_new == 1 else causal_mask(n_new, start, tgt_ids.device)
            is_causal = False
        positions = self.self_attention_positions(self.decoder_positions, start, n_new)
        self_mask, is_causal = with_bias(self_mask, is_causal, positions)
        h = self._stack(tgt_ids, start, self_mask, is_causal, positions, buffers, cross_kv, cross_mask, group)
        return h, cache, (copy, cross_mask, group)

    def _ragged(self, tgt_ids: Tensor, cache: DecoderCache, start: int) -> Tensor:
        """The decoder's final states (N, T, d) over a cache with holes (`DecoderCache.valid`, which covers the
        T new tokens too): each row's tokens take the positions of its kept tokens before them, and no query
        reads a hole or a filler."""
        valid = cache.valid  # (N, start + T)
        positions = token_positions(valid)  # (N, L)
        if int(positions[:, -1].max()) >= self.cfg.max_positions:
            raise ValueError(f"a row of {int(positions[:, -1].max()) + 1} tokens exceeds model.max_positions="
                             f"{self.cfg.max_positions}")
        mask, attention = per_token_attention(self.decoder_positions, valid, positions, tgt_ids.shape[1], start)
        return self._stack(tgt_ids, positions[:, start:], mask, False, attention, cache.layers, cache.cross_kv,
                           cache.cross_mask, cache.group)

    def _stack(self, tgt_ids: Tensor, start: int | Tensor, self_mask: Tensor | None, is_causal: bool,
               positions: AttentionPositions, buffers: Sequence[KVBuffer | StaticKV | None],
               cross_kv: Sequence[KV | Tensor],
               cross_mask: Tensor | None, group: int) -> Tensor:
        """The decoder's one forward, final states (B, T, d) of `tgt_ids` embedded from position `start` (an int,
        `step_at`'s (1,) device tensor, or each token's own position (B, T) over a cache with holes): the eager
        decoder and the step a CUDA graph captures both run it, each with its own masks and key/value buffers."""
        if isinstance(start, Tensor) and start.dim() == 2:
            x = self.tgt_embed(tgt_ids, positions=start)
        else:
            x = self.tgt_embed(tgt_ids, start)
        skipped = dropped_layers(len(self.decoder_layers), self.cfg.decoder_layerdrop, self.training)
        for layer, buffer, kv, skip in zip(self.decoder_layers, buffers, cross_kv, skipped, strict=True):
            if not skip:
                x = layer(x, self_mask, is_causal, buffer, kv, cross_mask, group, positions.rotary)
        return self.decoder_norm(x)

    def step_at(self, tgt_ids: Tensor, position: Tensor, cache: StaticCache) -> Tensor:
        """One decoding step at a position held in a (1,) long device tensor: logits (rows, 1, V) for the last
        tokens tgt_ids (rows, 1) of the cache's first `cache.rows` rows, their keys/values written into the
        cache's buffers at that position (`StaticKV`). No shape or address depends on the position (attention reads
        the buffers' whole capacity, the positions after this one masked; relative positions compute their
        angles or bias from the position tensor), so one CUDA graph of this call serves a whole search
        (engines.graphs). No copy attention (`step_at_blocker`); the cache's lengths are the caller's to
        advance."""
        capacity = cache.capacity
        self_mask = (torch.arange(capacity, device=position.device) <= position)[None, None, None, :]  # (1, 1, 1, C)
        positions = AttentionPositions() if self.decoder_positions is None else self.decoder_positions(
            position, 1, capacity)
        self_mask, _ = with_bias(self_mask, False, positions)  # a float (1, H, 1, C) mask with a position bias
        h = self._stack(tgt_ids, position, self_mask, False, positions, cache.buffers(position), cache.cross_kv,
                        cache.cross_mask, cache.group)
        return self.output(self.output_input(h))  # (rows, 1, V)

    @property
    def layout(self) -> RowLayout:
        return self.cfg.layout

    def blocks(self) -> list[nn.Module]:
        """Every Transformer layer, the encoder's then the decoder's (what training checkpoints or compiles)."""
        return [*self.encoder_layers, *self.decoder_layers]

    def attention_modules(self) -> list[tuple[nn.Module, str]]:
        """Each stack's attention modules with their kind (the model boundary's, for inspection)."""
        return ([(layer.self_attn, "encoder") for layer in self.encoder_layers]
                + [(layer.self_attn, "decoder_self") for layer in self.decoder_layers]
                + [(layer.cross_attn, "cross") for layer in self.decoder_layers])

    def step_at_blocker(self) -> str | None:
        """Why this model cannot decode with `step_at`, or None: copy attention mixes in a distribution over the
        source, outside the captured projection."""
        if self.pointer is not None:
            return "copy attention is not a plain output projection"
        return None

    def forward(self, src_ids: Tensor, src_pad_mask: Tensor, tgt_in_ids: Tensor) -> Tensor:
        """Teacher-forced logits (B, T, V) for decoder inputs `tgt_in_ids` (B, T)."""
        memory = self.encode(src_ids, src_pad_mask)
        logits, _ = self.decode(tgt_in_ids, memory, src_pad_mask, src_ids=src_ids)
        return logits

    def output_states(self, src_ids: Tensor, src_pad_mask: Tensor, tgt_in_ids: Tensor) -> Tensor:
        """Teacher-forced inputs of the output layer (B, T, d): what `forward` projects to logits, for a loss
        that fuses the projection (`seqlab.train.output_loss`). Not for copy attention, whose output is
        not a projection."""
        if self.pointer is not None:
            raise ValueError("a model with copy attention has no plain output projection to fuse with the loss")
        memory = self.encode(src_ids, src_pad_mask)
        h, _, _ = self._decoder(tgt_in_ids, memory, src_pad_mask, None, src_ids)
        return self.output_input(h)
