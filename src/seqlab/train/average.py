"""Checkpoint averaging: `seqlab average --out OUT.ckpt A.ckpt B.ckpt ...` (`make average`).

fairseq's `average_checkpoints`: the element-wise mean of every floating-point weight of
N checkpoints of one model (typically the last N of a run: `train.keep_last_checkpoints=N`);
everything else of the checkpoint (the seqlab description, tokenizer, optimizer and loop
state, integer buffers) is the newest checkpoint's, so the result loads, evaluates and
resumes like any other. The mean is taken in float64 and stored in each weight's dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seqlab.checkpoint import CheckpointError, read_checkpoint


def average_checkpoints(paths: Sequence[Path | str]) -> dict[str, Any]:
    """The newest checkpoint with its floating-point weights replaced by the mean over `paths`."""
    if len(paths) < 2:
        raise CheckpointError("averaging needs at least two checkpoints")
    states = [read_checkpoint(p) for p in paths]
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
    out = dict(base)
    out["state_dict"] = averaged
    out["seqlab"] = {**base["seqlab"], "averaged_from": [str(p) for p in paths]}
    return out
