"""Decoding: search strategies, logits processors, generate() and score()."""

from seqlab.decoding.config import DecodingConfig
from seqlab.decoding.generate import (
    GenerateOutput,
    build_processors,
    check_precision,
    generate,
    precision_context,
)
from seqlab.decoding.scoring import score

__all__ = ["DecodingConfig", "GenerateOutput", "build_processors", "check_precision", "generate", "precision_context",
           "score"]
