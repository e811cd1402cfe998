"""AdamW as seqlab builds it: one kernel for the whole update where torch has one."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from seqlab.config import ConfigError

FUSED_DEVICES = ("cpu", "cuda")  # where torch's AdamW has its fused kernel


def use_fused(setting: bool | None, params: Iterable[torch.Tensor], precision: str | None) -> bool:
    """Whether AdamW runs fused: `setting` when given, else on CPU and CUDA parameters unless fp16 mixed
    precision (Lightning's loss scaler unscales before clipping, which a fused step would do itself).

    Why fused by default: the plain AdamW loops over the parameters in Python, a dozen operations each;
    for the bench model (97 tensors, 7.6M values) that is 9-13 ms per update on a 2-core CPU against
    3.3-3.5 ms fused (docs/performance.md), 3-5% of a bf16 training step. It computes the same update,
    rounded in another order: parameters can differ from the loop's in the last bit (1.2e-7 after 20
    updates in a test).
    """
    if setting is not None:
        return setting
    return not loss_scaled(precision) and all(p.device.type in FUSED_DEVICES for p in params)


def loss_scaled(precision: str | None) -> bool:
    """Whether a Lightning precision scales the loss (fp16: "16-mixed", "16-true", "16")."""
    return precision is not None and str(precision).startswith("16")


def check_fused_clipping(fused: bool | None, clip_norm: float | None, precision: str | None) -> None:
    """Fail before any data is read where a fused AdamW would meet fp16 loss scaling and clipping: the fused
    step unscales the gradients itself, after the clipping that Lightning must run on unscaled ones."""
    if fused and clip_norm is not None and loss_scaled(precision):
        raise ConfigError("optim.fused=true cannot be clipped under trainer.precision=16-mixed (the fused step "
                          "unscales fp16 gradients itself, after clipping would have run): set optim.fused=null "
                          "or false, or optim.clip_norm=null")


def adamw(groups: list[dict[str, Any]], lr: float, betas: tuple[float, float], eps: float = 1e-8,
          fused: bool | None = None, precision: str | None = None, capturable: bool = False) -> torch.optim.AdamW:
    """AdamW over parameter groups (each {"params": [...], ...}), fused as `use_fused` decides; `capturable`:
    its step counts kept on the device, so that a CUDA graph can capture the update (train.graphs)."""
    params = [p for g in groups for p in g["params"]]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=use_fused(fused, params, precision) or None,
                             capturable=capturable)
