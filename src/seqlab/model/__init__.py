"""The encoder-decoder Transformer and its variants."""

from seqlab.model.cache import DecoderCache
from seqlab.model.config import ConfigError, ModelConfig
from seqlab.model.transformer import Seq2SeqTransformer

__all__ = ["ConfigError", "DecoderCache", "ModelConfig", "Seq2SeqTransformer"]
