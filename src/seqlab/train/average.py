"""Checkpoint averaging: `seqlab average --out OUT.ckpt A.ckpt B.ckpt ...` (`make average`).

fairseq's `average_checkpoints`: the element-wise mean of every floating-point weight of
N checkpoints of one model (typically the last N of a run: `train.keep_last_checkpoints=N`);
everything else of the checkpoint (the seqlab description, tokenizer, optimizer and loop
state, integer buffers) is the newest checkpoint's, so the result loads, evaluates and
resumes like any other. The mean is taken in float64 and stored in each weight's dtype.

Checkpoints trained with low-rank adapters (train.lora) are averaged as the models they decode as: each is
merged first (`model.adapters`; the mean of the adapters' A and B matrices is not the mean of the adapted
models, B A being a product), so the result is a plain checkpoint, which evaluates and exports like any other
but holds no adapters to resume (its optimizer and loop state are left out).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seqlab.checkpoint import CheckpointError, model_weights, read_checkpoint
from seqlab.model.adapters import has_adapters

RESUME_STATE = ("optimizer_states", "lr_schedulers", "loops", "callbacks")  # what only resuming reads


def average_checkpoints(paths: Sequence[Path | str]) -> dict[str, Any]:
    """The newest checkpoint with its floating-point weights replaced by the mean over `paths`."""
    if len(paths) < 2:
        raise CheckpointError("averaging needs at least two checkpoints")
    states = [read_checkpoint(p) for p in paths]
    adapted = [has_adapters(s["state_dict"]) for s in states]
    if any(adapted):
        states = [merged(state, path) for state, path in zip(states, paths, strict=True)]
    newest = max(range(len(states)), key=lambda i: states[i].get("global_step", 0))
    base = states[newest]
    model = base["seqlab"].get("model_config")
    for path, state in zip(paths, states, strict=True):
        if state["seqlab"].get("model_config") != model:
            raise CheckpointError(f"{path}: a different model_config than {paths[newest]}; only checkpoints of "
                                  "one model can be averaged")
        if state["state_dict"].keys() != base["state_dict"].keys() or any(
                state["state_dict"][k].shape != v.shape for k, v in base["state_dict"].items()):
            raise CheckpointError(f"{path}: its weights differ in names or shapes from {paths[newest]}")
    averaged = {}
    for key, value in base["state_dict"].items():
        if value.is_floating_point():
            mean = sum(s["state_dict"][key].double() for s in states) / len(states)
            averaged[key] = mean.to(value.dtype)
        else:
            averaged[key] = value
    out = {k: v for k, v in base.items() if not any(adapted) or k not in RESUME_STATE}
    out["state_dict"] = averaged
    out["seqlab"] = {**base["seqlab"], "averaged_from": [str(p) for p in paths]}
    return out


def merged(state: dict[str, Any], path: Path | str) -> dict[str, Any]:
    """A checkpoint with its adapters merged into the weights they adapt (one without adapters as it is)."""
    if not has_adapters(state["state_dict"]):
        return state
    model = model_weights(state, path)
    meta = {k: v for k, v in state["seqlab"].items() if k != "lora"}
    return {**state, "seqlab": meta, "state_dict": {f"model.{k}": v for k, v in model.items()}}
