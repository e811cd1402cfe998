"""seqlab: a research pipeline for sequence-to-sequence Transformers."""

__version__ = "0.1.0"
