"""Which engine decodes: seqlab's own search, the same search with its fp32 linear layers on oneDNN's packed
weights (`seqlab_onednn`, model.onednn: faster on CPUs where PyTorch's MKL matmul is slow), the same search
with its decoder step replayed as a CUDA graph (`seqlab_graphs`, engines.graphs: a GPU, where the step's
launches outweigh its arithmetic) or compiled for a CPU (`seqlab_compiled`, engines.compiled: one source a
call, where the step's operators outweigh its arithmetic), or CTranslate2's (interop.ct2) on an export of
the checkpoint.

Chosen with `engine=` in eval and translate, checked before the checkpoint loads, so a sweep, its
metrics, intervals and paired tests can compare the engines on one test set. `engine=auto` (the default)
takes the fastest engine whose outputs equal seqlab's fp32 search (`choose_engine`). `precision` is the
engine's computation: fp32 or bf16 for both; int8 is CTranslate2's `compute_type=int8` (weights
quantized at export) or, for seqlab on a CPU, PyTorch's dynamic int8 linear layers
(`model.quantize.dynamic_int8`). An int8 engine decodes; references are still scored in fp32.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from seqlab.config import ConfigError, check_choice
from seqlab.data.tokenizer import Tokenizer
from seqlab.decoding import DecodingConfig, GenerateOutput, precision_context
from seqlab.decoding.engine import BaseEngine, DecodeBatch, DecodingEngine, SearchEngine, search
from seqlab.engines.compiled import PRECISIONS as COMPILED_PRECISIONS
from seqlab.engines.compiled import CompiledEngine
from seqlab.engines.ct2 import CT2Engine, check_decodable
from seqlab.engines.graphs import GraphedStep, check_graphable
from seqlab.engines.probe import batch_sources, search_speedup
from seqlab.hardware import cpu_model
from seqlab.io import atomic_write_text
from seqlab.model import Model
from seqlab.model.onednn import onednn_available, onednn_linears
from seqlab.model.quantize import dynamic_int8

# seqlab_onednn: seqlab's search with its fp32 linear layers on oneDNN's packed weights (model.onednn)
# auto: the fastest of seqlab and seqlab_onednn on this machine (choose_engine)
# seqlab_graphs: seqlab's search with the decoder step as a CUDA graph (engines.graphs)
# seqlab_compiled: seqlab's search with the decoder step compiled for a CPU (engines.compiled)
Engine = Literal["auto", "seqlab", "seqlab_onednn", "seqlab_graphs", "seqlab_compiled", "ctranslate2"]
STATIC_STEP = ("seqlab_graphs", "seqlab_compiled")  # the engines that decode with the static step (step_at)
# precision -> (CTranslate2 weight quantization at export, compute_type)
CT2_PRECISION = {"fp32": (None, "float32"), "bf16": (None, "bfloat16"), "int8": ("int8", "int8")}


def check_engine(owner: str, engine: str, precision: str, decoding: DecodingConfig | None) -> None:
    """Fail, naming the key, on an engine, precision or decoding setting that cannot run together."""
    check_choice(owner, "engine", engine, Engine)
    if engine == "seqlab_onednn" and precision != "fp32":
        raise ConfigError(f"{owner}.engine=seqlab_onednn packs fp32 weights; use {owner}.precision=fp32 with it, or "
                          f"engine=seqlab for precision={precision}")
    if engine == "seqlab_graphs" and precision not in ("fp32", "bf16"):
        raise ConfigError(f"{owner}.engine=seqlab_graphs captures the fp32 or bf16 step; use "
                          f"{owner}.precision=fp32 or bf16 with it")
    if engine == "seqlab_compiled" and precision not in COMPILED_PRECISIONS:
        raise ConfigError(f"{owner}.engine=seqlab_compiled compiles the fp32 or int8 step; use {owner}.precision="
                          f"fp32 or int8 with it, or engine=seqlab for precision={precision}")
    if engine in STATIC_STEP:
        if decoding is not None and decoding.draft is not None:
            raise ConfigError(f"{owner}.engine={engine} runs a one-token step, which decoding.draft="
                              f"{decoding.draft} replaces by multi-token calls: use {owner}.engine=seqlab with it")
        if decoding is not None and decoding.coverage_penalty is not None:
            raise ConfigError(f"{owner}.engine={engine} does not record attention, which a coverage penalty "
                              f"reads: use {owner}.engine=seqlab with decoding.coverage_penalty")
    if engine == "ctranslate2":
        if precision not in CT2_PRECISION:
            raise ConfigError(f"{owner}.precision={precision!r} is not one of {list(CT2_PRECISION)}")
        if decoding is not None:
            check_decodable(decoding)


# oneDNN must run the probe's search this much faster for engine=auto to take it: the probe is the search
# itself (engines.probe), so the margin only keeps a level pair (within the probe's ~3% run-to-run spread) on
# the reference's sums. The bench measured whole searches 1.13x-1.51x faster on oneDNN on an AMD EPYC with
# AVX-512 (probe 1.25x-1.35x at batches) and 0.89x-0.99x as fast on an Intel Xeon with AMX.
AUTO_MARGIN = 1.1
AUTO_CACHE = "engine_auto.json"


@dataclass(frozen=True)
class EngineChoice:
    engine: str  # seqlab | seqlab_onednn
    reason: str  # for the log and the bench


def choose_engine(precision: str, device: str, cache_dir: Path | None, rows: int = 1,
                  one_source: bool = False) -> EngineChoice:
    """What `engine=auto` decodes with: the fastest engine whose outputs equal seqlab's fp32 search.

    The candidates are seqlab's own search on PyTorch's products (MKL on a CPU) and the same search on
    oneDNN's packed fp32 weights: the same search and sums of the same products, which gave the same outputs
    on the Bible test split (greedy and beam 5; int8 and CTranslate2 do not, so they are never chosen).
    oneDNN is taken in fp32 on a CPU when a one-off probe, a short search timed on both engines
    (`search_speedup`), finds it AUTO_MARGIN x faster. `rows`: the decoding's rows per source (1 greedy or
    sampling, k beam k); `one_source`: the command decodes one source a call (`seqlab translate` on a
    terminal), where a step reads the weights for one source's rows only, instead of a batch's. The probe is
    cached per CPU model, torch version, thread count and probe in `cache_dir` (None: not cached)."""
    if precision != "fp32" or not str(device).startswith("cpu"):
        return EngineChoice("seqlab", f"precision={precision} on {device}: seqlab's own search")
    if not onednn_available():
        return EngineChoice("seqlab", f"torch {torch.__version__} has no oneDNN packed linear here")
    sources = 1 if one_source else batch_sources(rows)
    probe = f"a search of {'one source' if one_source else f'{sources} sources'} in {rows} row{'s' * (rows > 1)} each"
    key = f"{cpu_model()} | torch {torch.__version__} | {torch.get_num_threads()} threads | {probe}"
    path = None if cache_dir is None else Path(cache_dir) / AUTO_CACHE
    cached = json.loads(path.read_text()) if path is not None and path.is_file() else {}
    if key not in cached:
        cached[key] = {"speedup": round(search_speedup(rows, sources), 3), "date": time.strftime("%Y-%m-%d")}
        if path is not None:
            atomic_write_text(path, json.dumps(cached, indent=1) + "\n")
    speedup = cached[key]["speedup"]
    engine = "seqlab_onednn" if speedup >= AUTO_MARGIN else "seqlab"
    where = f"probe of {cached[key]['date']}" + (f", cached in {path}" if path is not None else "")
    return EngineChoice(engine, f"oneDNN {speedup:.2f}x as fast as the default engine in {probe} ({where}); "
                                f"oneDNN is taken at {AUTO_MARGIN}x or more")


class VariantEngine(BaseEngine):
    """seqlab's own search on another form of the model that runs on a CPU only (int8 linear layers, or fp32
    ones on oneDNN's packed weights)."""

    def __init__(self, model: Model, variant: Callable[[Model], Model],
                 setting: str, kernels: str, on_gpu: str) -> None:
        if next(model.parameters()).device.type != "cpu":
            raise ConfigError(f"{setting} runs on a CPU ({kernels}); use device=cpu, or {on_gpu} on a GPU")
        self.model = variant(model)

    def decode(self, model: Model, batch: DecodeBatch) -> GenerateOutput:
        return search(self.model, batch)


class GraphEngine(BaseEngine):
    """seqlab's own search with its decoder step replayed as a CUDA graph (engines.graphs); checked before
    decoding (a GPU, a model whose step has fixed shapes)."""

    def __init__(self, model: Model, precision: str) -> None:
        if next(model.parameters()).device.type != "cuda":
            raise ConfigError("engine=seqlab_graphs replays CUDA graphs: use device=cuda, or engine=seqlab on a CPU")
        check_graphable(model, "engine=seqlab_graphs")
        self.precision = precision

    def decode(self, model: Model, batch: DecodeBatch) -> GenerateOutput:
        with precision_context(self.precision, batch.src_ids.device):
            return search(model, batch, step=GraphedStep)


def make_engine(engine: str, checkpoint: Path, model: Model, tokenizer: Tokenizer, cache_dir: Path,
                precision: str) -> DecodingEngine:
    """seqlab's own search (fp32 or bf16 autocast), seqlab on int8 or oneDNN-packed linear layers or with a
    CUDA-graph step, or CTranslate2 on an export of `checkpoint` (made once, cached)."""
    if engine == "seqlab" and precision == "int8":
        return VariantEngine(model, dynamic_int8, "precision=int8 with engine=seqlab", "PyTorch's int8 linear kernels",
                             "precision=bf16")
    if engine == "seqlab":
        return SearchEngine(precision)
    if engine == "seqlab_onednn":
        if not onednn_available():
            raise ConfigError(f"engine=seqlab_onednn: torch {torch.__version__} has no oneDNN packed linear on this "
                              "machine; use engine=seqlab")
        return VariantEngine(model, onednn_linears, "engine=seqlab_onednn", "oneDNN's packed fp32 linear layers",
                             "engine=seqlab")
    if engine == "seqlab_graphs":
        return GraphEngine(model, precision)
    if engine == "seqlab_compiled":
        return CompiledEngine(model, precision)
    quantization, compute_type = CT2_PRECISION[precision]
    return CT2Engine.for_checkpoint(checkpoint, model.cpu(), tokenizer, cache_dir, quantization, compute_type)
