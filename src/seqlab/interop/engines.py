"""Which engine decodes: seqlab's own search, the same search with its fp32 linear layers on oneDNN's packed
weights (`seqlab_onednn`, model.onednn: faster on CPUs where PyTorch's MKL matmul is slow), or
CTranslate2's (interop.ct2) on an export of the checkpoint.

Chosen with `engine=` in eval and translate, checked before the checkpoint loads, so a sweep, its
metrics, intervals and paired tests can compare the engines on one test set. `precision` is the
engine's computation: fp32 or bf16 for both; int8 is CTranslate2's `compute_type=int8` (weights
quantized at export) or, for seqlab on a CPU, PyTorch's dynamic int8 linear layers
(`model.quantize.dynamic_int8`). An int8 engine decodes; references are still scored in fp32.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor

from seqlab.config import ConfigError, check_choice
from seqlab.data.tokenizer import Tokenizer
from seqlab.decoding import DecodingConfig, GenerateOutput, generate, precision_label
from seqlab.interop.ct2 import CT2Engine, check_decodable
from seqlab.model import Seq2SeqTransformer
from seqlab.model.onednn import onednn_available, onednn_linears
from seqlab.model.quantize import dynamic_int8

# seqlab_onednn: seqlab's search with its fp32 linear layers on oneDNN's packed weights (model.onednn)
Engine = Literal["seqlab", "seqlab_onednn", "ctranslate2"]
LABEL_SUFFIX = {"seqlab": "", "seqlab_onednn": "_onednn", "ctranslate2": "_ct2"}
# precision -> (CTranslate2 weight quantization at export, compute_type)
CT2_PRECISION = {"fp32": (None, "float32"), "bf16": (None, "bfloat16"), "int8": ("int8", "int8")}


def check_engine(owner: str, engine: str, precision: str, decoding: DecodingConfig | None) -> None:
    """Fail, naming the key, on an engine, precision or decoding setting that cannot run together."""
    check_choice(owner, "engine", engine, Engine)
    if engine == "seqlab_onednn" and precision != "fp32":
        raise ConfigError(f"{owner}.engine=seqlab_onednn packs fp32 weights; use {owner}.precision=fp32 with it, or "
                          f"engine=seqlab for precision={precision}")
    if engine == "ctranslate2":
        if precision not in CT2_PRECISION:
            raise ConfigError(f"{owner}.precision={precision!r} is not one of {list(CT2_PRECISION)}")
        if decoding is not None:
            check_decodable(decoding)


def run_label(label: str, precision: str, engine: str) -> str:
    """A setting's label with its precision when not fp32 and its engine when not seqlab's
    (e.g. beam5_lp1_int8_ct2, beam5_lp1_onednn). An unknown engine gets a label too: it fails later, by
    name, once its result folder exists to record the failure."""
    return precision_label(label, precision) + LABEL_SUFFIX.get(engine, f"_{engine}")


class VariantEngine:
    """seqlab's own search on another form of the model that runs on a CPU only (int8 linear layers, or fp32
    ones on oneDNN's packed weights), used like `generate`."""

    def __init__(self, model: Seq2SeqTransformer, variant: Callable[[Seq2SeqTransformer], Seq2SeqTransformer],
                 setting: str, kernels: str, on_gpu: str) -> None:
        if next(model.parameters()).device.type != "cpu":
            raise ConfigError(f"{setting} runs on a CPU ({kernels}); use device=cpu, or {on_gpu} on a GPU")
        self.model = variant(model)

    def generate(self, model: Seq2SeqTransformer, src_ids: Tensor, src_pad_mask: Tensor,
                 cfg: DecodingConfig) -> GenerateOutput:
        return generate(self.model, src_ids, src_pad_mask, cfg)


def make_engine(engine: str, checkpoint: Path, model: Seq2SeqTransformer, tokenizer: Tokenizer, cache_dir: Path,
                precision: str) -> CT2Engine | VariantEngine | None:
    """None for seqlab's own search (fp32 or bf16 autocast), seqlab on int8 or oneDNN-packed linear layers,
    or CTranslate2 on an export of `checkpoint` (made once, cached)."""
    if engine == "seqlab" and precision == "int8":
        return VariantEngine(model, dynamic_int8, "precision=int8 with engine=seqlab", "PyTorch's int8 linear kernels",
                             "precision=bf16")
    if engine == "seqlab":
        return None
    if engine == "seqlab_onednn":
        if not onednn_available():
            raise ConfigError(f"engine=seqlab_onednn: torch {torch.__version__} has no oneDNN packed linear on this "
                              "machine; use engine=seqlab")
        return VariantEngine(model, onednn_linears, "engine=seqlab_onednn", "oneDNN's packed fp32 linear layers",
                             "engine=seqlab")
    quantization, compute_type = CT2_PRECISION[precision]
    return CT2Engine.for_checkpoint(checkpoint, model.cpu(), tokenizer, cache_dir, quantization, compute_type)
