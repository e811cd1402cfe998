"""The Transformer and its variants: the encoder-decoder and the one-stack models (decoder-only, prefix LM),
built from a ModelConfig by `build_model`, the one place where `model.architecture` becomes a class."""

from seqlab.model.boundary import DecodingModel
from seqlab.model.cache import DecoderCache
from seqlab.model.causal import CausalTransformer
from seqlab.model.config import ConfigError, ModelConfig
from seqlab.model.layout import RowLayout
from seqlab.model.transformer import Seq2SeqTransformer

# What training, export and the engines build on: either model class (both serve `DecodingModel`, the boundary
# the searches and scoring see, which an ensemble serves too; and forward, output_states, `output`).
Model = Seq2SeqTransformer | CausalTransformer


def build_model(cfg: ModelConfig) -> Model:
    """The model of `cfg`'s architecture, freshly initialized."""
    return CausalTransformer(cfg) if cfg.one_stack else Seq2SeqTransformer(cfg)


__all__ = ["CausalTransformer", "ConfigError", "DecoderCache", "DecodingModel", "Model", "ModelConfig", "RowLayout",
           "Seq2SeqTransformer", "build_model"]
