"""Which engine decodes: seqlab's own search, or CTranslate2's (interop.ct2) on an export of the checkpoint.

Chosen with `engine=` in eval and translate, checked before the checkpoint loads, so a sweep, its
metrics, intervals and paired tests can compare the engines on one test set. `precision` is the
engine's computation: fp32 or bf16 for both, int8 for CTranslate2 (int8 weights, CTranslate2's
`compute_type=int8`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from seqlab.config import ConfigError, check_choice
from seqlab.data.tokenizer import Tokenizer
from seqlab.decoding import DecodingConfig
from seqlab.interop.ct2 import CT2Engine, check_decodable
from seqlab.model import Seq2SeqTransformer

Engine = Literal["seqlab", "ctranslate2"]
# precision -> (CTranslate2 weight quantization at export, compute_type)
CT2_PRECISION = {"fp32": (None, "float32"), "bf16": (None, "bfloat16"), "int8": ("int8", "int8")}


def check_engine(owner: str, engine: str, precision: str, decoding: DecodingConfig | None) -> None:
    """Fail, naming the key, on an engine, precision or decoding setting that cannot run together."""
    check_choice(owner, "engine", engine, Engine)
    if engine == "seqlab" and precision == "int8":
        raise ConfigError(f"{owner}.precision=int8 runs on engine=ctranslate2 only; add engine=ctranslate2 or "
                          "use precision=fp32 or bf16")
    if engine == "ctranslate2":
        if precision not in CT2_PRECISION:
            raise ConfigError(f"{owner}.precision={precision!r} is not one of {list(CT2_PRECISION)}")
        if decoding is not None:
            check_decodable(decoding)


def engine_label(label: str, engine: str) -> str:
    """A setting's label with its engine when not seqlab's (e.g. beam5_lp1_ct2)."""
    return label if engine == "seqlab" else f"{label}_ct2"


def make_engine(engine: str, checkpoint: Path, model: Seq2SeqTransformer, tokenizer: Tokenizer, cache_dir: Path,
                precision: str) -> CT2Engine | None:
    """None for seqlab's own search; else CTranslate2 on an export of `checkpoint` (made once, cached)."""
    if engine == "seqlab":
        return None
    quantization, compute_type = CT2_PRECISION[precision]
    return CT2Engine.for_checkpoint(checkpoint, model.cpu(), tokenizer, cache_dir, quantization, compute_type)
