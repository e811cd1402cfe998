"""What every inference command (evaluate, translate) sets up the same way: the typed request, checked
before the checkpoint loads, then the loaded model with the decoding it will actually use.

The order matters and is the same for both commands: a wrong decoding, precision or engine value fails
before the (possibly large) checkpoint is read; what only the checkpoint can tell (its corpus' task, its
own decoding defaults) is checked right after loading, before anything is decoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from seqlab.app.configs import checkpoint_decoding, plain
from seqlab.checkpoint import CheckpointInfo, load_for_inference, resolve
from seqlab.config import resolve_device, typed
from seqlab.data.tokenizer import Tokenizer
from seqlab.decoding import DecodingConfig, check_precision
from seqlab.decoding.mbr import check_task
from seqlab.interop.engines import check_engine, make_engine, run_label
from seqlab.model import Seq2SeqTransformer


@dataclass(frozen=True)
class InferenceRequest:
    """An inference command's settings, typed and checked; nothing is loaded yet."""

    command: str  # the config that named them (eval, translate): error messages say `eval.precision=...`
    checkpoint: str
    decoding: DecodingConfig
    precision: str
    engine: str
    from_checkpoint: bool  # decode with the checkpoint's own defaults (an imported model's generation config)

    @classmethod
    def from_cfg(cls, cfg: DictConfig, command: str) -> InferenceRequest:
        decoding = typed(DecodingConfig, plain(cfg.decoding), "decoding")
        precision, engine = str(cfg.precision), str(cfg.engine)
        check_precision(precision, command)
        check_engine(command, engine, precision, decoding)
        return cls(command, str(cfg.ckpt), decoding, precision, engine, bool(cfg.decoding_from_checkpoint))

    @property
    def label(self) -> str:
        return run_label(self.decoding.label, self.precision, self.engine)


@dataclass
class Loaded:
    """A checkpoint ready to decode: the model on its device, and the engine that decodes for it (None:
    seqlab's own search in fp32 or bf16 autocast)."""

    model: Seq2SeqTransformer
    tokenizer: Tokenizer
    info: CheckpointInfo
    decoding: DecodingConfig  # the request's, or the checkpoint's own
    label: str
    engine: Any
    device: str


def load(request: InferenceRequest, device: str, cache_dir: Path, task_checked: bool = False) -> Loaded:
    """Load the checkpoint and build the engine. `task_checked`: the decoding was already checked against
    another corpus' task; otherwise it is checked against the checkpoint's own corpus here."""
    device = resolve_device("", device)
    path = resolve(request.checkpoint)
    model, tokenizer, info = load_for_inference(path, device=device)
    decoding = checkpoint_decoding(info) if request.from_checkpoint else request.decoding
    if not task_checked and info.data_config:
        corpus = info.data_config["corpus"]
        check_task(decoding.mbr, corpus["task"], f"the checkpoint's corpus {corpus['name']}")
    engine = make_engine(request.engine, path, model, tokenizer, cache_dir, request.precision)
    label = run_label(decoding.label, request.precision, request.engine)
    return Loaded(model, tokenizer, info, decoding, label, engine, device)
