"""The Transformer and its variants: the encoder-decoder and the one-stack models (decoder-only, prefix LM),
built from a ModelConfig by `build_model`, the one place where `model.architecture` becomes a class."""

from seqlab.model.cache import DecoderCache
from seqlab.model.causal import CausalTransformer
from seqlab.model.config import ConfigError, ModelConfig
from seqlab.model.transformer import Seq2SeqTransformer

# What the searches, scoring, training and engines talk to: either model serves the same methods
# (encode, start_cache, decode, forward, output_states, step_at_blocker; `cfg`, `output`).
Model = Seq2SeqTransformer | CausalTransformer


def build_model(cfg: ModelConfig) -> Model:
    """The model of `cfg`'s architecture, freshly initialized."""
    return CausalTransformer(cfg) if cfg.one_stack else Seq2SeqTransformer(cfg)


__all__ = ["CausalTransformer", "ConfigError", "DecoderCache", "Model", "ModelConfig", "Seq2SeqTransformer",
           "build_model"]
