"""Interoperability with Hugging Face Marian (OPUS-MT) models; needs `transformers` only when called."""

from seqlab.interop.hf import InteropError, from_hf, to_hf

__all__ = ["InteropError", "from_hf", "to_hf"]
