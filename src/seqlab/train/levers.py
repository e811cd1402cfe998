"""The training step's speed levers (`train.fused_loss`, `train.compile=layers|loss|all`,
`train.bf16_weights`), one place for the training loop and the bench (`seqlab bench levers=true`) alike. Each
keeps the plain step's loss and gradients up to rounding; which wins depends on the machine
(docs/performance.md, "Training levers")."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from seqlab.config import ConfigError
from seqlab.model import Model
from seqlab.train.losses import label_smoothed_nll
from seqlab.train.output_loss import fused_label_smoothed_nll


def step_loss(model: Model, src: Tensor, pad: Tensor, tgt_in: Tensor, tgt: Tensor, epsilon: float,
              fused: bool = False, compiled: bool = False, bf16: bool = False,
              keep: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Summed label-smoothed loss, summed NLL and target-token count of one teacher-forced batch; `fused`
    projects and scores a block of rows at a time (`seqlab.train.output_loss`), never holding the logits,
    and `compiled` runs each block's arithmetic through torch.compile. A model with copy attention has no
    plain projection: it always takes the unfused path. `bf16`: the whole step in bf16 on a bf16 copy of
    the weights (`bf16_weights`). `keep`: (B, T) the target tokens counted (None: those that are not PAD)."""
    if bf16:
        with torch.autocast(src.device.type, enabled=False), bf16_weights(model):
            return step_loss(model, src, pad, tgt_in, tgt, epsilon, fused, compiled, keep=keep)
    if fused and model.pointer is None and model.cfg.logit_softcap is None:  # a capped output is not fused
        h = model.output_states(src, pad, tgt_in)  # (B, T, d)
        return fused_label_smoothed_nll(h, model.output.weight, model.output.bias, tgt, epsilon, model.cfg.pad_id,
                                        compiled=compiled, keep=keep)
    return label_smoothed_nll(model(src, pad, tgt_in), tgt, epsilon, model.cfg.pad_id, keep)


def check_bf16_weights(bf16: bool, precision: str, why: str = "") -> None:
    """train.bf16_weights computes in bf16: a run whose trainer.precision (`why`: how auto chose it) is another
    would mix bf16 steps with validations in that precision, and a fp16 run would lose its loss scaling."""
    if bf16 and precision not in ("bf16-mixed", "auto"):
        chosen = f" ({why})" if why else ""
        raise ConfigError(f"train.bf16_weights=true runs the training step in bf16, but trainer.precision={precision}"
                          f"{chosen}; set trainer.precision=bf16-mixed, or train.bf16_weights=false")


@contextmanager
def bf16_weights(model: Model) -> Iterator[dict[int, Tensor]]:
    """`train.bf16_weights`: within the block the model's fp32 parameters and buffers are bf16 copies, each
    made once (yields them by the original's id); on leaving, the originals are back in place.

    Why: under bf16 autocast every matrix product casts its inputs, and the ops autocast keeps in fp32
    (layer norm, softmax) hand fp32 activations to the next product, which casts them again; the GPU
    profile puts these copies at a sixth of the step. With bf16 weights and no autocast the step runs in
    bf16 from end to end (the loss still upcasts its logits). The cast is differentiable, so each gradient
    comes back to its fp32 parameter: the parameters stay the optimizer's fp32 master weights and the
    checkpoint's, as fairseq's `--bf16` keeps fp32 master copies. A tied matrix is one parameter, so one
    copy, and its uses' gradients add up. Buffers other than fp32 (RoPE's fp64 frequencies, exact angles)
    stay as they are.

    The copies go into each module's own tables, where `module.weight` finds them, and the originals go
    back by identity, so tied parameters stay one object (torch.func.functional_call restores a tied
    parameter as a new object, which would untie it).
    """
    copies: dict[int, Tensor] = {}
    swapped: list[tuple[dict[str, Any], str, Tensor]] = []
    try:
        for module in model.modules():
            for table in (module._parameters, module._buffers):
                for name, tensor in table.items():
                    if tensor is not None and tensor.dtype == torch.float32:
                        if id(tensor) not in copies:
                            copies[id(tensor)] = tensor.to(torch.bfloat16)
                        swapped.append((table, name, tensor))
                        table[name] = copies[id(tensor)]
        yield copies
    finally:
        for table, name, tensor in swapped:
            table[name] = tensor


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


def checkpoint_layers(model: Model) -> int:
    """Activation checkpointing for every encoder and decoder layer (`model.transformer.Checkpointable`), in
    place; the number of layers. Memory for activations drops from every layer's to one layer's at a time plus
    each layer's input, for one more forward of each layer in the backward."""
    layers = model.blocks()
    for layer in layers:
        layer.checkpointed = True
    return len(layers)


def compile_layers(model: Model) -> int:
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
    layers = model.blocks()
    for layer in layers:
        layer.compile()
    return len(layers)
