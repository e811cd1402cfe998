"""The formats seqlab models go in and out of: Hugging Face encoder-decoder families (import and export,
exact: interop.families, interop.hf, interop.hf_export, interop.export) and CTranslate2 models (interop.ct2).
`transformers` and `ctranslate2` are imported only when called."""

from seqlab.interop.hf import InteropError, from_hf, to_hf

__all__ = ["InteropError", "from_hf", "to_hf"]
