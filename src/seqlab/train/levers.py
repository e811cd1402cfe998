"""The training step's speed levers (`train.fused_loss`, `train.compile=layers|loss|all`), one place for the
training loop and the bench (`seqlab bench levers=true`) alike. Each keeps the plain step's loss and gradients
up to rounding; which wins depends on the machine (docs/performance.md, "Training levers")."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import Tensor

from seqlab.config import ConfigError
from seqlab.model import Seq2SeqTransformer
from seqlab.train.losses import label_smoothed_nll
from seqlab.train.output_loss import fused_label_smoothed_nll


def step_loss(model: Seq2SeqTransformer, src: Tensor, pad: Tensor, tgt_in: Tensor, tgt: Tensor, epsilon: float,
              fused: bool = False, compiled: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """Summed label-smoothed loss, summed NLL and target-token count of one teacher-forced batch; `fused`
    projects and scores a block of rows at a time (`seqlab.train.output_loss`), never holding the logits,
    and `compiled` runs each block's arithmetic through torch.compile. A model with copy attention has no
    plain projection: it always takes the unfused path."""
    if fused and model.pointer is None:
        h = model.output_states(src, pad, tgt_in)  # (B, T, d)
        return fused_label_smoothed_nll(h, model.output.weight, model.output.bias, tgt, epsilon, model.cfg.pad_id,
                                        compiled=compiled)
    return label_smoothed_nll(model(src, pad, tgt_in), tgt, epsilon, model.cfg.pad_id)


def compile_cache_dir() -> Path:
    """Where torch.compile keeps its compiled graphs between runs: $TORCHINDUCTOR_CACHE_DIR when set, else
    seqlab's folder in the user's cache (not /tmp, which a reboot empties)."""
    if found := os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return Path(found)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "seqlab" / "inductor"


def use_compile_cache() -> None:
    """Point inductor at `compile_cache_dir()` unless the user chose a folder (before the first compile)."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(compile_cache_dir()))


def compile_layers(model: Seq2SeqTransformer) -> int:
    """Compile every encoder and decoder layer in place (`nn.Module.compile`: the parameters, their names and
    the checkpoints stay as they are); the number of layers compiled.

    Why regional: the layers of a stack share one structure, so Dynamo compiles each layer type once and
    reuses the graph for the others (guards on the module's parameters, not their values), where compiling
    the whole model would trace every layer and the decoding cache's Python control flow. What is left
    outside (embeddings, the loss) is a handful of kernels per step. The compiled graphs go to
    `compile_cache_dir()`, so the next run with the same shapes loads them instead of compiling.
    """
    if not hasattr(torch.compiler, "set_stance"):  # the quick validation decode runs the layers eagerly with it
        raise ConfigError(f"train.compile=layers needs torch >= 2.6 (this is {torch.__version__}); upgrade torch "
                          "or set train.compile=none")
    use_compile_cache()
    layers = [*model.encoder_layers, *model.decoder_layers]
    for layer in layers:
        layer.compile()
    return len(layers)
