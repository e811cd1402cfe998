"""ModelConfig: every architecture variant as a typed, validated field."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any, Literal

from seqlab.config import ConfigError, check_choice, check_types, typed
from seqlab.constants import BOS_ID, EOS_ID, PAD_ID, never_emitted
from seqlab.model.layout import RowLayout, layout_of

__all__ = ["ConfigError", "ModelConfig", "check_choice", "check_types"]

NormPosition = Literal["pre", "post"]
Positions = Literal["sinusoidal", "learned", "rope", "alibi", "t5", "none"]
ABSOLUTE_POSITIONS = ("sinusoidal", "learned")  # a table added to the embeddings; the others act in self-attention
# none: three matrices; decoder: the decoder's input and output share one; all: one for all three;
# inputs: encoder and decoder inputs share one, the output projection has its own (T5 v1.1, Flan-T5, mT5)
TieEmbeddings = Literal["none", "decoder", "all", "inputs"]
# gelu is the exact (erf) GELU; gelu_tanh its tanh approximation (Hugging Face's gelu_new, T5 v1.1's)
Activation = Literal["relu", "gelu", "gelu_tanh", "silu"]
Norm = Literal["layernorm", "rmsnorm"]
# sinusoid tables: marian = the paper's frequencies 10000^(-2i/d), sines then cosines (Marian, PEGASUS);
# fairseq = tensor2tensor's 10000^(-i/(d/2 - 1)), sines then cosines, computed in fp32 (fairseq, M2M100, NLLB)
SinusoidLayout = Literal["marian", "fairseq"]
# how a learned position table starts: small = N(0, d^-1/2) (fairseq's, like the token embeddings before their
# sqrt(d) scale); unit = N(0, 1) (the scale of the scaled token embeddings); sinusoid = the sinusoid table
PositionInit = Literal["small", "unit", "sinusoid"]
# encoder_decoder: an encoder and a cross-attending decoder (Vaswani et al. 2017); decoder_only: one causal stack
# over source and target as one sequence, the target after the decoder start token (a language model);
# prefix_lm: the same stack, the source part attending to all of itself (Raffel et al. 2020's prefix LM)
Architecture = Literal["encoder_decoder", "decoder_only", "prefix_lm"]
ONE_STACK = ("decoder_only", "prefix_lm")
# What a one-stack model's target starts from: bos, the decoder start token after the source (a separator; the
# models seqlab trains); prompt, the prompt's own last token, which the target continues (a causal LM's text:
# GPT-2, Llama)
Start = Literal["bos", "prompt"]
AttentionKernel = Literal["auto", "sdpa", "math"]
DropoutKernel = Literal["auto", "torch", "bits"]


@dataclass(frozen=True)
class ModelConfig:
    """Shape and variant of an encoder-decoder Transformer.

    `tgt_vocab_size=None` means one vocabulary shared by source and target.
    `final_norm=None` means "what the variant needs": a LayerNorm after each
    stack for pre-LN (Xiong et al. 2020), none for post-LN (Vaswani et al. 2017).
    `copy_attention` adds a pointer-generator output (model/copy.py); the model
    then returns log-probabilities, and needs a shared vocabulary.

    The pretrained families (interop/families.py) are these choices and no more: `norm` (LayerNorm, or T5's
    RMSNorm without mean or bias), `activation` and `gated_ffn` (GEGLU = gelu + gated, SwiGLU = silu + gated:
    act(x W_gate) * (x W_up), Shazeer 2020), `bias` on every attention and feed-forward projection,
    `scale_attention` (1/sqrt(d_head) on the logits; T5 has none), `d_head` (T5's d_kv; null = d_model /
    n_heads), `position_offset` (position p reads row p + offset of the table: BART's learned positions 2,
    fairseq's sinusoids pad_id + 1), `sinusoid_layout`, and `rescale_output` (the decoder output times
    d^-1/2 before the output projection: T5 v1.0's tied head).
    """

    src_vocab_size: int
    tgt_vocab_size: int | None = None
    architecture: Architecture = "encoder_decoder"
    start: Start = "bos"
    d_model: int = 512
    n_heads: int = 8
    encoder_layers: int = 6
    decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    # LayerDrop (Fan et al. 2020, "Reducing transformer depth on demand with structured dropout"): a training
    # forward skips each layer of the stack with this probability (fairseq's --encoder-layerdrop, Hugging Face's
    # encoder_layerdrop: M2M100's config sets 0.05); evaluation and decoding run every layer. A one-stack model's
    # stack is its decoder.
    encoder_layerdrop: float = 0.0
    decoder_layerdrop: float = 0.0
    activation: Activation = "relu"
    gated_ffn: bool = False
    norm: Norm = "layernorm"
    bias: bool = True
    scale_attention: bool = True
    d_head: int | None = None
    # grouped-query attention (Ainslie et al. 2023): key/value heads shared by n_heads / kv_heads query heads
    # each (Llama 2 70B, Llama 3, Mistral, Qwen2); null = n_heads (multi-head attention), 1 = multi-query
    kv_heads: int | None = None
    qkv_bias: bool | None = None  # biases on the q, k, v projections alone (Qwen2); null = as `bias` says
    # sliding-window attention (Beltagy et al. 2020; Mistral, Qwen2): a token attends to the keys fewer than
    # this many positions before it, in the layers `sliding_layers` lists (null: every layer); null = full
    sliding_window: int | None = None
    sliding_layers: tuple[int, ...] | None = None
    # Gemma 2 / 3's departures (Gemma Team 2024, 2025): each sublayer's output normalized again before its
    # residual add (`sandwich_norm`, the "sandwich" LayerNorm of Ding et al. 2021); the attention logits scaled
    # by attention_scalar ** -0.5 rather than d_head ** -0.5 (query_pre_attn_scalar); logits soft-capped as
    # cap * tanh(x / cap), the attention's (`attn_softcap`) and the output's (`logit_softcap`); an RMSNorm on
    # each head's queries and keys before RoPE (`qk_norm`); the sliding layers' own RoPE base (`local_rope_base`)
    sandwich_norm: bool = False
    attention_scalar: float | None = None
    attn_softcap: float | None = None
    logit_softcap: float | None = None
    qk_norm: bool = False
    local_rope_base: float | None = None
    max_positions: int = 1024
    position_offset: int = 0
    sinusoid_layout: SinusoidLayout = "marian"
    position_init: PositionInit = "small"
    norm_position: NormPosition = "post"
    # sinusoidal | learned: a table added to the embeddings; rope | alibi | t5: relative, inside every
    # self-attention (never cross-attention); none (model/positions.py). Each relative scheme's own keys,
    # null = its default (an error under another scheme): RoPE's base (10000) and rotated dimensions per head
    # (all); T5's buckets (32) and the distance beyond which they stop growing (128).
    positions: Positions = "sinusoidal"
    rope_base: float | None = None
    rope_dim: int | None = None
    t5_buckets: int | None = None
    t5_max_distance: int | None = None
    tie_embeddings: TieEmbeddings = "all"
    scale_embedding: bool = True
    layernorm_embedding: bool = False
    final_norm: bool | None = None
    output_bias: bool = False
    rescale_output: bool = False
    copy_attention: bool = False
    layer_norm_eps: float = 1e-5
    # How attention is computed (the result is the same within rounding): "sdpa" = PyTorch's fused
    # scaled_dot_product_attention, "math" = matmul, softmax, matmul; "auto" = sdpa, except on CPUs in
    # bf16 (autocast) and in decoding steps, where the fused CPU kernel is slower at these shapes
    # (layers.uses_math_attention, docs/performance.md).
    attention_kernel: AttentionKernel = "auto"
    # How dropout masks are drawn: "torch" = F.dropout (a Bernoulli draw per element), "bits" = 16 random
    # bits per element, four per 64-bit draw (model/dropout.py; the same expectation, drop rate within
    # 1/131072 of p); "auto" = bits on CPU, where PyTorch's is ~4x slower at these sizes, torch elsewhere.
    dropout_kernel: DropoutKernel = "auto"
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    # further ids that end a row as eos_id does (an instruct model's generation_config.json lists several:
    # Qwen2.5-Instruct's <|im_end|> and <|endoftext|>, Llama 3.x's three); eos_id is the one a forced or
    # padded end writes, as `generate` writes the first of its list
    extra_eos_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        own = "model"
        check_types(self, own)
        check_choice(own, "norm_position", self.norm_position, NormPosition)
        check_choice(own, "positions", self.positions, Positions)
        check_choice(own, "tie_embeddings", self.tie_embeddings, TieEmbeddings)
        check_choice(own, "activation", self.activation, Activation)
        check_choice(own, "norm", self.norm, Norm)
        check_choice(own, "sinusoid_layout", self.sinusoid_layout, SinusoidLayout)
        check_choice(own, "position_init", self.position_init, PositionInit)
        check_choice(own, "attention_kernel", self.attention_kernel, AttentionKernel)
        check_choice(own, "dropout_kernel", self.dropout_kernel, DropoutKernel)
        for name in ("src_vocab_size", "d_model", "n_heads", "d_ff", "max_positions"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigError(f"{own}.{name}={getattr(self, name)!r} must be a positive integer")
        if self.tgt_vocab_size is not None and self.tgt_vocab_size < 1:
            raise ConfigError(f"{own}.tgt_vocab_size={self.tgt_vocab_size} must be positive, "
                              "or null for a shared vocabulary")
        check_choice(own, "architecture", self.architecture, Architecture)
        check_choice(own, "start", self.start, Start)
        if self.start == "prompt" and self.architecture != "decoder_only":
            raise ConfigError(f"{own}.start=prompt continues a prompt's text, a decoder-only LM's way; "
                              f"{own}.architecture={self.architecture} starts its target from bos")
        self._check_window(own)
        self._check_gemma(own)
        if self.architecture in ONE_STACK:
            self._check_one_stack(own)
        elif self.encoder_layers < 1:
            raise ConfigError(f"{own}.encoder_layers={self.encoder_layers} must be at least 1 (or use "
                              f"{own}.architecture=decoder_only for a model without an encoder)")
        if self.decoder_layers < 1:
            raise ConfigError(f"{own}.decoder_layers={self.decoder_layers} must be at least 1")
        if self.kv_heads is not None and not (1 <= self.kv_heads <= self.n_heads and self.n_heads % self.kv_heads == 0):
            raise ConfigError(f"{own}.kv_heads={self.kv_heads} must divide {own}.n_heads={self.n_heads} (each "
                              "key/value head serves n_heads / kv_heads query heads); null = n_heads")
        for name in ("dropout", "attention_dropout", "activation_dropout", "encoder_layerdrop", "decoder_layerdrop"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"{own}.{name}={getattr(self, name)} must be in [0, 1)")
        if self.d_head is not None and self.d_head < 1:
            raise ConfigError(f"{own}.d_head={self.d_head} must be a positive integer, or null for d_model / n_heads")
        if self.d_head is None and self.d_model % self.n_heads:
            raise ConfigError(
                f"{own}.d_model={self.d_model} is not divisible by {own}.n_heads={self.n_heads}; "
                f"pick n_heads from the divisors of d_model, a d_model that is a multiple of n_heads, "
                f"or set {own}.d_head (each head's size, independent of d_model)"
            )
        self._check_absolute_keys(own)
        if self.positions == "sinusoidal" and self.d_model % 2:
            raise ConfigError(f"{own}.d_model={self.d_model} must be even for sinusoidal positions")
        self._check_position_keys(own)
        self._check_vocabulary(own)

    def _check_vocabulary(self, own: str) -> None:
        """What the vocabulary allows: tied tables and copying need one shared by source and target; the special
        ids and the further end tokens are in it."""
        separate = (f"the source and target have separate vocabularies (data.tokenizer.joint=false, "
                    f"tgt_vocab_size={self.tgt_vocab_size}), where the same id means different pieces")
        if self.tie_embeddings in ("all", "inputs") and not self.shared_vocab:
            raise ConfigError(
                f"{own}.tie_embeddings={self.tie_embeddings} shares one matrix across encoder and decoder, but "
                f"{separate}; train a joint vocabulary (data.tokenizer.joint=true) or use model.tie_embeddings=decoder"
            )
        if self.copy_attention and not self.shared_vocab:
            raise ConfigError(
                f"{own}.copy_attention=true copies source ids into the output, but {separate}; "
                "train a joint vocabulary (data.tokenizer.joint=true) or set model.copy_attention=false"
            )
        for name in ("pad_id", "bos_id", "eos_id"):
            if not 0 <= getattr(self, name) < min(self.src_vocab_size, self.target_vocab_size):
                raise ConfigError(f"{own}.{name}={getattr(self, name)} is outside the vocabulary")
        object.__setattr__(self, "extra_eos_ids", tuple(int(i) for i in self.extra_eos_ids))
        for i in self.extra_eos_ids:
            if not 0 <= i < self.target_vocab_size or i == self.eos_id:
                raise ConfigError(f"{own}.extra_eos_ids={list(self.extra_eos_ids)}: {i} is outside the vocabulary "
                                  f"of {self.target_vocab_size} or repeats eos_id={self.eos_id}")

    def _check_window(self, own: str) -> None:
        """A sliding window is a one-stack model's (the imported causal LMs'), over layers it has."""
        if self.sliding_layers is not None:
            object.__setattr__(self, "sliding_layers", tuple(int(i) for i in self.sliding_layers))
        if self.sliding_window is None:
            if self.sliding_layers is not None:
                raise ConfigError(f"{own}.sliding_layers={list(self.sliding_layers)} without {own}.sliding_window: "
                                  "set the window, or sliding_layers=null")
            return
        if self.sliding_window < 1:
            raise ConfigError(f"{own}.sliding_window={self.sliding_window} must be a positive number of positions")
        if self.architecture not in ONE_STACK:
            raise ConfigError(f"{own}.sliding_window={self.sliding_window} is computed for one-stack models; "
                              f"{own}.architecture={self.architecture} attends fully: set {own}.sliding_window=null")
        outside = [i for i in self.sliding_layers or () if not 0 <= i < self.decoder_layers]
        if outside:
            raise ConfigError(f"{own}.sliding_layers={list(self.sliding_layers or ())}: {outside} outside the "
                              f"{self.decoder_layers} layers")

    def _check_gemma(self, own: str) -> None:
        """The Gemma departures where they are computed (see their fields)."""
        if self.sandwich_norm and self.norm_position != "pre":
            raise ConfigError(f"{own}.sandwich_norm=true normalizes a pre-norm block's output as well; set "
                              f"{own}.norm_position=pre")
        for name in ("attention_scalar", "attn_softcap", "logit_softcap", "local_rope_base"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(f"{own}.{name}={value} must be positive, or null")
        if self.logit_softcap is not None and self.architecture not in ONE_STACK:
            raise ConfigError(f"{own}.logit_softcap caps a one-stack model's output; {own}.architecture="
                              f"{self.architecture}: set it to null")
        if self.local_rope_base is not None and (self.positions != "rope" or self.sliding_window is None):
            raise ConfigError(f"{own}.local_rope_base is the sliding layers' RoPE base: it needs {own}.positions=rope "
                              f"and {own}.sliding_window")

    def windowed(self, layer: int) -> bool:
        """Whether layer `layer` attends through the sliding window."""
        return self.sliding_window is not None and (self.sliding_layers is None or layer in self.sliding_layers)

    def _check_one_stack(self, own: str) -> None:
        """A decoder-only or prefix LM reads source and target as one sequence of one vocabulary."""
        arch = f"{own}.architecture={self.architecture}"
        if self.encoder_layers != 0:
            raise ConfigError(f"{own}.encoder_layers={self.encoder_layers} with {arch}: the model is one stack of "
                              f"{own}.decoder_layers layers; set {own}.encoder_layers=0")
        if self.encoder_layerdrop:
            raise ConfigError(f"{own}.encoder_layerdrop={self.encoder_layerdrop} with {arch}: the model has no "
                              f"encoder; its one stack drops layers by {own}.decoder_layerdrop")
        if not self.shared_vocab:
            raise ConfigError(f"{arch} reads source and target as one sequence, which needs one vocabulary "
                              f"(tgt_vocab_size={self.tgt_vocab_size}): train a joint tokenizer "
                              "(data.tokenizer.joint=true)")
        if self.copy_attention:
            raise ConfigError(f"{own}.copy_attention=true copies from an encoder's source; {arch} has none: set "
                              f"{own}.copy_attention=false")
        if self.tie_embeddings == "inputs":
            raise ConfigError(f"{own}.tie_embeddings=inputs ties an encoder's and a decoder's input tables; {arch} has "
                              f"one: use all (its output tied to it) or none")

    def _check_absolute_keys(self, own: str) -> None:
        """The offset and layout belong to the absolute tables that read them."""
        if self.position_offset < 0:
            raise ConfigError(f"{own}.position_offset={self.position_offset} must be >= 0")
        if self.position_offset and not self.absolute_positions:
            raise ConfigError(f"{own}.position_offset={self.position_offset} shifts an absolute table, but "
                              f"{own}.positions={self.positions}; set it to 0 or use sinusoidal or learned positions")
        if self.sinusoid_layout != "marian" and self.positions != "sinusoidal":
            raise ConfigError(f"{own}.sinusoid_layout={self.sinusoid_layout} is a setting of {own}.positions="
                              f"sinusoidal, but {own}.positions={self.positions}; remove it")
        if self.position_init != "small" and self.positions != "learned":
            raise ConfigError(f"{own}.position_init={self.position_init} starts a learned table, but {own}.positions="
                              f"{self.positions}; remove it or use {own}.positions=learned")
        if self.sinusoid_layout == "fairseq" and self.d_model < 4:
            raise ConfigError(f"{own}.sinusoid_layout=fairseq divides by d_model / 2 - 1; d_model must be >= 4")

    def _check_position_keys(self, own: str) -> None:
        """A relative scheme's keys belong to it alone, and must describe a model that can run."""
        owners = {"rope_base": "rope", "rope_dim": "rope", "t5_buckets": "t5", "t5_max_distance": "t5"}
        for key, scheme in owners.items():
            if getattr(self, key) is not None and self.positions != scheme:
                raise ConfigError(f"{own}.{key}={getattr(self, key)!r} is a setting of {own}.positions={scheme}, "
                                  f"but {own}.positions={self.positions}; remove it or set {own}.positions={scheme}")
        if self.rope_dim is not None and not (0 < self.rope_dim <= self.head_dim and self.rope_dim % 2 == 0):
            raise ConfigError(f"{own}.rope_dim={self.rope_dim} must be even and at most the head dimension "
                              f"d_model / n_heads = {self.head_dim}")
        if self.positions == "rope" and self.rope_dim is None and self.head_dim % 2:
            raise ConfigError(f"{own}.positions=rope rotates pairs of dimensions, but the head dimension "
                              f"{self.head_dim} is odd; set {own}.rope_dim to an even number below it")
        if self.rope_base is not None and self.rope_base <= 1:
            raise ConfigError(f"{own}.rope_base={self.rope_base} must be greater than 1")
        if self.t5_buckets is not None and (self.t5_buckets < 4 or self.t5_buckets % 4):
            raise ConfigError(f"{own}.t5_buckets={self.t5_buckets} must be a multiple of 4 (half per direction, "
                              "half of those exact), at least 4")
        if self.positions == "t5" and self.relative_max_distance <= self.relative_buckets // 4:
            raise ConfigError(f"{own}.t5_max_distance={self.relative_max_distance} must exceed the exact range "
                              f"t5_buckets / 4 = {self.relative_buckets // 4}")

    @property
    def absolute_positions(self) -> bool:
        """Whether positions are a table added to the embeddings (else relative, or none)."""
        return self.positions in ABSOLUTE_POSITIONS

    @property
    def rotary_base(self) -> float:
        return 10000.0 if self.rope_base is None else float(self.rope_base)

    @property
    def rotary_dim(self) -> int:
        return self.head_dim if self.rope_dim is None else self.rope_dim

    @property
    def relative_buckets(self) -> int:
        return 32 if self.t5_buckets is None else self.t5_buckets

    @property
    def relative_max_distance(self) -> int:
        return 128 if self.t5_max_distance is None else self.t5_max_distance

    @property
    def shared_vocab(self) -> bool:
        """One vocabulary for both sides (`tgt_vocab_size=None`). Two vocabularies of equal size are
        not shared: id 737 can be a different piece in each."""
        return self.tgt_vocab_size is None

    @property
    def target_vocab_size(self) -> int:
        return self.src_vocab_size if self.tgt_vocab_size is None else self.tgt_vocab_size

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads if self.d_head is None else self.d_head

    @property
    def one_stack(self) -> bool:
        """A decoder-only or prefix LM: no encoder, source and target one sequence."""
        return self.architecture in ONE_STACK

    @cached_property  # (frozen: computed once; the searches ask it every batch, as they ask the end ids)
    def layout(self) -> RowLayout:
        """How the model reads a row (seqlab.model.layout): what the code around the model asks instead of
        comparing the architecture."""
        return layout_of(self.architecture, self.start)

    @property
    def key_value_heads(self) -> int:
        return self.n_heads if self.kv_heads is None else self.kv_heads

    @property
    def kv_dim(self) -> int:
        """The width of the key (or value) heads together, kv_heads * d_head."""
        return self.key_value_heads * self.head_dim

    @property
    def projection_bias(self) -> bool:
        """Whether the q, k, v projections have biases."""
        return self.bias if self.qkv_bias is None else self.qkv_bias

    @property
    def attention_dim(self) -> int:
        """The width of the heads together, n_heads * d_head: d_model unless `d_head` says otherwise."""
        return self.n_heads * self.head_dim

    @property
    def attention_scale(self) -> float | None:
        """The factor on q.k: None = 1/sqrt(d_head), the fused kernel's own default; 1.0 without scaling;
        attention_scalar ** -0.5 where it is set (Gemma)."""
        if not self.scale_attention:
            return 1.0
        return None if self.attention_scalar is None else self.attention_scalar**-0.5

    @property
    def position_rows(self) -> int:
        """Rows of an absolute position table: every position plus the offset before the first."""
        return self.max_positions + self.position_offset

    @property
    def use_final_norm(self) -> bool:
        return self.norm_position == "pre" if self.final_norm is None else self.final_norm

    @cached_property
    def end_ids(self) -> tuple[int, ...]:
        """Every id that ends a row: eos_id first."""
        return (self.eos_id, *self.extra_eos_ids)

    @cached_property
    def unemitted(self) -> tuple[int, ...]:
        """The ids seqlab's rule (`decoding.suppress_special`) never emits: a model seqlab trains never outputs
        its pad or decoder start token; an imported causal LM (start=prompt) bans nothing, as `generate` does.
        An end token is never among them (a causal LM without a pad token pads with its EOS)."""
        return () if self.start == "prompt" else never_emitted(self)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ModelConfig:
        """Build from a plain mapping, naming any key that is not a field."""
        return typed(cls, dict(values), "model")
