"""CausalTransformer: one stack over source and target as one sequence (decoder-only LM, prefix LM).

It serves the same boundary as Seq2SeqTransformer, so every search, the scoring, training and the engines
use it unchanged: `forward(src_ids, src_pad_mask, tgt_in_ids)` gives the logits of the target positions,
`encode` and `start_cache` read the prompt (the source) into the cache, `decode` steps it. The sequence is
the source (right-padded, as seqlab pads sources), then the decoder input: for a model trained by seqlab the
decoder start token, which separates the target from the source, then the target; for an imported causal LM
(`model.start=prompt`) the prompt's own last token, which the target continues. Padding inside the sequence
is masked out of every key, and each token's position counts the real tokens before it (Hugging Face's
`attention_mask.cumsum(-1) - 1` under left padding), so a padded batch gives each prompt its own result.

decoder_only: causal attention throughout (Radford et al. 2018). prefix_lm: the source part attends to all
of itself, the target causally to everything before it (Raffel et al. 2020, Section 3.2.1; Zhang et al.
2022's prefix LM); the decoder start token belongs to the target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor, nn

from seqlab.model.cache import DecoderCache, KVBuffer, StaticCache, StaticKV
from seqlab.model.config import ModelConfig
from seqlab.model.dropout import dropped_layers
from seqlab.model.layers import Embedder, make_norm, per_token_attention, token_positions
from seqlab.model.layout import RowLayout
from seqlab.model.packing import Packing, at_real
from seqlab.model.positions import AttentionPositions, Rotary, make_relative
from seqlab.model.products import Linear
from seqlab.model.transformer import EncoderLayer, initialize


def within(mask: Tensor, near: Tensor) -> Tensor:
    """`mask` (a bool mask, True = attend, or a float bias, -inf = masked) restricted to the keys `near` marks."""
    return mask & near if mask.dtype == torch.bool else mask.masked_fill(~near, float("-inf"))


class CausalTransformer(nn.Module):
    """A decoder-only or prefix LM with the variants of ModelConfig (see the module docstring).

    Initialization as Seq2SeqTransformer's. Its parts carry that model's names where they are the same parts
    (`tgt_embed` = `src_embed`, the one table; `decoder_layers`, `decoder_norm`, `decoder_positions`,
    `output`), so parameter counts, weight tables and engines read both alike.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if not cfg.one_stack:
            raise ValueError(f"CausalTransformer is one stack; model.architecture={cfg.architecture} is not")
        self.cfg = cfg
        d = cfg.d_model
        padding_idx = None if cfg.bos_id == cfg.pad_id else cfg.pad_id
        tokens = nn.Embedding(cfg.src_vocab_size, d, padding_idx=padding_idx)
        self.tgt_embed = Embedder(cfg, tokens)
        self.encoder_layers = nn.ModuleList()
        self.encoder_positions, self.encoder_norm, self.pointer = None, nn.Identity(), None
        self.decoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.decoder_layers))
        self.decoder_positions = make_relative(cfg, causal=cfg.architecture == "decoder_only")
        # Gemma 3: the sliding layers' RoPE of their own base
        self.local_positions = None if cfg.local_rope_base is None else \
            make_relative(replace(cfg, rope_base=cfg.local_rope_base), causal=True)
        self.decoder_norm = make_norm(cfg) if cfg.use_final_norm else nn.Identity()
        self.output_scale = d**-0.5 if cfg.rescale_output else None
        self.output = Linear(d, cfg.target_vocab_size, bias=cfg.output_bias)
        self.reset_parameters()
        if cfg.tie_embeddings in ("all", "decoder"):
            self.output.weight = tokens.weight

    def reset_parameters(self) -> None:
        initialize(self)

    @property
    def src_embed(self) -> Embedder:
        """The source's embedder: the one table (a property, so that the state dict names it once)."""
        return self.tgt_embed

    @property
    def prefix_lm(self) -> bool:
        return self.cfg.architecture == "prefix_lm"

    def _stack(self, ids: Tensor, valid: Tensor, past: int, source: int,
               cache: DecoderCache | None) -> Tensor:
        """Final states (B, T, d) of the T new tokens `ids` at sequence indices past..past+T-1; `valid` (B, L):
        which of all L = past + T tokens are real; a cache, if given, holds the first `past` tokens' keys."""
        top = self.cfg.max_positions - 1
        positions = token_positions(valid)  # (B, L)
        if past == 0 and source and int(positions[:, :source].max()) > top:
            raise ValueError(f"a source of {int(positions[:, :source].max()) + 1} tokens exceeds model.max_positions="
                             f"{self.cfg.max_positions}; truncate the prompt or build a model with more positions")
        # keys within the window, by the real tokens between them (Hugging Face's `kv > q - window` on a
        # left-padded batch, whose padding comes before every real token)
        near = None if self.cfg.sliding_window is None else \
            (positions[:, past:, None] - positions[:, None, :]) < self.cfg.sliding_window  # (B, T, L)
        # Past the last position are only tokens nobody reads: a target's right padding in a batch of ragged
        # targets, the steps a batched search runs on a row after its limit (which keeps every row's own tokens
        # within its room: decoding.prompts.position_room); they take the last position.
        positions = positions.clamp(max=top)
        new = positions[:, past:]  # (B, T)
        mask, attention = per_token_attention(self.decoder_positions, valid, positions, ids.shape[1], past, source,
                                              self.prefix_lm)
        local = mask if near is None else within(mask, near[:, None])
        local_rotary = attention.rotary if self.local_positions is None else \
            self.local_positions.rows(positions[:, past:], positions).rotary
        x = self.tgt_embed(ids, positions=new)  # (B, T, d)
        packing = Packing.of(valid[:, past:])  # a padded prompt or source: the layers compute its real tokens
        if packing is not None:
            x = packing.pack(x)  # (R, d)
        buffers = cache.layers if cache is not None else [None] * len(self.decoder_layers)
        x = self._layers(x, (mask, attention.rotary), (local, local_rotary), buffers, packing)
        return x if packing is None else packing.unpack(x)

    def _layers(self, x: Tensor, full: tuple[Tensor, Rotary | None], windowed: tuple[Tensor, Rotary | None],
                buffers: Sequence[KVBuffer | StaticKV | None], packing: Packing | None) -> Tensor:
        """The stack and its final norm over x (B, T, d) or packed (R, d): each layer with the mask and rotary
        angles of its kind (`windowed`: a sliding-window layer's), its cache buffer, skipped where LayerDrop
        draws it (the one layer loop of `_stack` and `step_at`)."""
        skipped = dropped_layers(len(self.decoder_layers), self.cfg.decoder_layerdrop, self.training)
        for i, (layer, buffer) in enumerate(zip(self.decoder_layers, buffers, strict=True)):
            if not skipped[i]:
                x = layer(x, *(windowed if self.cfg.windowed(i) else full), buffer, packing)
        return self.decoder_norm(x)

    def output_input(self, h: Tensor) -> Tensor:
        return h if self.output_scale is None else h * self.output_scale

    def logits(self, h: Tensor) -> Tensor:
        """The output layer on final states, soft-capped where the model caps it (Gemma 2)."""
        out = self.output(self.output_input(h))
        cap = self.cfg.logit_softcap
        return out if cap is None else torch.tanh(out / cap) * cap

    def _sequence(self, src_ids: Tensor, src_pad_mask: Tensor, tgt_in_ids: Tensor) -> Tensor:
        """Final states (B, T, d) of the target positions of source + target, teacher-forced."""
        ids = torch.cat([src_ids, tgt_in_ids], dim=1)  # (B, S + T)
        valid = torch.cat([~src_pad_mask, torch.ones_like(tgt_in_ids, dtype=torch.bool)], dim=1)
        return self._stack(ids, valid, 0, src_ids.shape[1], None)[:, src_ids.shape[1]:]

    def forward(self, src_ids: Tensor, src_pad_mask: Tensor, tgt_in_ids: Tensor) -> Tensor:
        """Teacher-forced logits (B, T, V) of the target positions, given the source (B, S) and decoder inputs
        (B, T). Target padding is on the right and hidden by causality, as in the encoder-decoder."""
        return self.logits(self._sequence(src_ids, src_pad_mask, tgt_in_ids))

    def output_states(self, src_ids: Tensor, src_pad_mask: Tensor, tgt_in_ids: Tensor) -> Tensor:
        """What `forward` projects to logits (B, T, d), for a loss that fuses the projection."""
        return self.output_input(self._sequence(src_ids, src_pad_mask, tgt_in_ids))

    def encode(self, src_ids: Tensor, src_pad_mask: Tensor) -> Tensor:
        """The prompt as `start_cache` reads it: a one-stack model has no encoder, so nothing is computed."""
        return src_ids

    def start_cache(self, memory: Tensor, src_pad_mask: Tensor, group: int = 1, capacity: int = 64,
                    src_ids: Tensor | None = None) -> DecoderCache:
        """A cache holding the prompt's keys and values (the prompt run once per source, then `group` rows per
        source), with room for `capacity` more tokens."""
        prompt = memory  # (G, P)
        cache = DecoderCache((), (~src_pad_mask)[:, None, None, :], group=1, capacity=prompt.shape[1] + capacity,
                             layers=len(self.decoder_layers), prompt_length=prompt.shape[1])
        if prompt.shape[1]:
            self._stack(prompt, ~src_pad_mask, 0, prompt.shape[1], cache)
        if group > 1:
            cache.expand_(group)
        return cache

    def copy_source(self, memory: Tensor, src_ids: Tensor | None) -> None:
        return None

    def decode(self, tgt_ids: Tensor, memory: Tensor | None, src_pad_mask: Tensor | None,
               cache: DecoderCache | None = None, src_ids: Tensor | None = None,
               states: list[Tensor] | None = None) -> tuple[Tensor, DecoderCache | None]:
        """Logits (B, T, V) of the new tokens `tgt_ids` after the prompt in `cache` and the tokens already in it
        (extended in place); without a cache, after the source `src_ids` (then `tgt_ids` is the whole target
        so far). `states` receives the final states (B, T, d)."""
        real = None  # (N, T) which new tokens are real, over a cache
        if cache is None:
            h = self._sequence(src_ids, src_pad_mask, tgt_ids)
        else:
            prompt = cache.cross_mask[:, 0, 0, :]  # (G, P) the prompt's real tokens, per source
            if cache.group > 1:
                prompt = prompt.repeat_interleave(cache.group, 0)
            past = cache.length
            generated = cache.valid if cache.valid is not None else prompt.new_ones(
                prompt.shape[0], past - cache.prompt_length + tgt_ids.shape[1])
            valid = torch.cat([prompt, generated], dim=1)  # (N, L)
            h = self._stack(tgt_ids, valid, past, cache.prompt_length, cache)
            real = valid[:, past:]
        if states is not None:
            states.append(h)
        return (self.logits(h) if real is None else at_real(real, h, self.logits)), cache

    def step_at(self, tgt_ids: Tensor, position: Tensor, cache: StaticCache) -> Tensor:
        """One decoding step at a sequence index held in a (1,) long device tensor: logits (rows, 1, V) for the
        last tokens tgt_ids (rows, 1) of the cache's first `cache.rows` rows, their keys/values written into the
        buffers there (`StaticKV`). As the encoder-decoder's `step_at`, no shape depends on the index: the keys
        are every slot of the buffers, the prompt's padding and the slots after the index masked, and the new
        token's position counts the real keys up to it (`decode`'s positions). A cache with holes (`valid`, a
        speculative search's) is the eager step's (engines.graphs)."""
        capacity, rows = cache.capacity, cache.rows
        # (G, P): the prompt's P positions taken from a shape, not a number, which a compiled step would be
        # specialized to (one program per prompt length)
        prompt = cache.cross_mask[:, 0, 0, :]
        if cache.group > 1:
            prompt = prompt.repeat_interleave(cache.group, 0)
        after = torch.arange(prompt.shape[1], capacity, device=position.device) <= position  # (C - P,)
        keys = torch.cat([prompt[:rows], after.expand(rows, -1)], dim=1)  # (rows, C)
        positions = token_positions(keys).clamp(max=self.cfg.max_positions - 1)  # (rows, C)
        new = positions.index_select(1, position)  # (rows, 1)
        attention = AttentionPositions() if self.decoder_positions is None else self.decoder_positions.rows(
            new, positions)
        mask = keys[:, None, None, :]  # (rows, 1, 1, C)
        if attention.bias is not None:
            mask = attention.bias.masked_fill(~mask, float("-inf"))
        x = self.tgt_embed(tgt_ids, positions=new)  # (rows, 1, d)
        full = (mask, attention.rotary)  # no sliding window (step_at_blocker): every layer's
        x = self._layers(x, full, full, cache.buffers(position), None)
        return self.logits(x)  # (rows, 1, V)

    @property
    def layout(self) -> RowLayout:
        return self.cfg.layout

    def blocks(self) -> list[nn.Module]:
        """Every Transformer layer of the one stack (what training checkpoints or compiles)."""
        return list(self.decoder_layers)

    def attention_modules(self) -> list[tuple[nn.Module, str]]:
        """The one stack's attention modules: its weights span source and target (`RowLayout.three_kinds`
        cuts them into the encoder's, the decoder's and the cross-attention's parts)."""
        return [(layer.self_attn, "decoder_self") for layer in self.decoder_layers]

    def step_at_blocker(self) -> str | None:
        """Why this model cannot decode with `step_at`, or None: a sliding window's keys and its layers' own
        rotary angles are the eager step's."""
        if self.cfg.sliding_window is not None or self.local_positions is not None:
            return "a sliding-window model's step is not captured"
        return None
