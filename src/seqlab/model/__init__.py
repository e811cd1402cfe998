"""The encoder-decoder Transformer and its variants."""

from seqlab.model.config import ConfigError, ModelConfig
from seqlab.model.transformer import DecoderCache, Seq2SeqTransformer

__all__ = ["ConfigError", "DecoderCache", "ModelConfig", "Seq2SeqTransformer"]
