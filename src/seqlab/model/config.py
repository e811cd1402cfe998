"""ModelConfig: every architecture variant as a typed, validated field."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from seqlab.config import ConfigError, check_choice, check_types, typed
from seqlab.constants import BOS_ID, EOS_ID, PAD_ID

__all__ = ["ConfigError", "ModelConfig", "check_choice", "check_types"]

NormPosition = Literal["pre", "post"]
Positions = Literal["sinusoidal", "learned"]
TieEmbeddings = Literal["none", "decoder", "all"]
Activation = Literal["relu", "gelu", "silu"]
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
    """

    src_vocab_size: int
    tgt_vocab_size: int | None = None
    d_model: int = 512
    n_heads: int = 8
    encoder_layers: int = 6
    decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    activation: Activation = "relu"
    max_positions: int = 1024
    norm_position: NormPosition = "post"
    positions: Positions = "sinusoidal"
    tie_embeddings: TieEmbeddings = "all"
    scale_embedding: bool = True
    layernorm_embedding: bool = False
    final_norm: bool | None = None
    output_bias: bool = False
    copy_attention: bool = False
    layer_norm_eps: float = 1e-5
    # How attention is computed (the result is the same within rounding): "sdpa" = PyTorch's fused
    # scaled_dot_product_attention, "math" = matmul, softmax, matmul; "auto" = sdpa, except on CPUs in
    # bf16 (autocast) and in decoding steps, where the fused CPU kernel is slower at these shapes
    # (layers.written_out, BENCHMARKS.md).
    attention_kernel: AttentionKernel = "auto"
    # How dropout masks are drawn: "torch" = F.dropout (a Bernoulli draw per element), "bits" = 16 random
    # bits per element, four per 64-bit draw (model/dropout.py; the same expectation, drop rate within
    # 1/131072 of p); "auto" = bits on CPU, where PyTorch's is ~4x slower at these sizes, torch elsewhere.
    dropout_kernel: DropoutKernel = "auto"
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID

    def __post_init__(self) -> None:
        own = "model"
        check_types(self, own)
        check_choice(own, "norm_position", self.norm_position, NormPosition)
        check_choice(own, "positions", self.positions, Positions)
        check_choice(own, "tie_embeddings", self.tie_embeddings, TieEmbeddings)
        check_choice(own, "activation", self.activation, Activation)
        check_choice(own, "attention_kernel", self.attention_kernel, AttentionKernel)
        check_choice(own, "dropout_kernel", self.dropout_kernel, DropoutKernel)
        for name in ("src_vocab_size", "d_model", "n_heads", "d_ff", "max_positions"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigError(f"{own}.{name}={getattr(self, name)!r} must be a positive integer")
        if self.tgt_vocab_size is not None and self.tgt_vocab_size < 1:
            raise ConfigError(f"{own}.tgt_vocab_size={self.tgt_vocab_size} must be positive, "
                              "or null for a shared vocabulary")
        for name in ("encoder_layers", "decoder_layers"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{own}.{name}={getattr(self, name)} must be at least 1")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"{own}.{name}={getattr(self, name)} must be in [0, 1)")
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"{own}.d_model={self.d_model} is not divisible by {own}.n_heads={self.n_heads}; "
                f"pick n_heads from the divisors of d_model or a d_model that is a multiple of n_heads"
            )
        if self.positions == "sinusoidal" and self.d_model % 2:
            raise ConfigError(f"{own}.d_model={self.d_model} must be even for sinusoidal positions")
        separate = (f"the source and target have separate vocabularies (data.tokenizer.joint=false, "
                    f"tgt_vocab_size={self.tgt_vocab_size}), where the same id means different pieces")
        if self.tie_embeddings == "all" and not self.shared_vocab:
            raise ConfigError(
                f"{own}.tie_embeddings=all shares one matrix across encoder and decoder, but {separate}; "
                "train a joint vocabulary (data.tokenizer.joint=true) or use model.tie_embeddings=decoder"
            )
        if self.copy_attention and not self.shared_vocab:
            raise ConfigError(
                f"{own}.copy_attention=true copies source ids into the output, but {separate}; "
                "train a joint vocabulary (data.tokenizer.joint=true) or set model.copy_attention=false"
            )
        for name in ("pad_id", "bos_id", "eos_id"):
            if not 0 <= getattr(self, name) < min(self.src_vocab_size, self.target_vocab_size):
                raise ConfigError(f"{own}.{name}={getattr(self, name)} is outside the vocabulary")

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
        return self.d_model // self.n_heads

    @property
    def use_final_norm(self) -> bool:
        return self.norm_position == "pre" if self.final_norm is None else self.final_norm

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ModelConfig:
        """Build from a plain mapping, naming any key that is not a field."""
        return typed(cls, dict(values), "model")
