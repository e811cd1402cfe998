"""Low-rank adapters merged into the weights they adapt: what a checkpoint trained with train.lora holds,
read back as the plain model every search, engine and export takes.

A LoRA checkpoint keeps each adapted projection as peft names it: the frozen `P.base_layer.weight` (and bias)
beside the adapter `P.lora_A.default.weight` (r, in) and `P.lora_B.default.weight` (out, r). Merging gives the
projection's plain name back, `P.weight = W + (alpha / r) B A` (peft's scaling without rsLoRA), so the merged
state loads into the model `build_model` makes, and nothing downstream knows adapters existed. Plain tensor
arithmetic: reading a checkpoint needs no peft.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

BASE, A, B = ".base_layer.", ".lora_A.default.weight", ".lora_B.default.weight"


def has_adapters(state: dict[str, Tensor]) -> bool:
    """Whether a state dict holds LoRA adapters (peft's names)."""
    return any(key.endswith(A) for key in state)


def merge_adapters(state: dict[str, Tensor], lora: dict[str, Any]) -> dict[str, Tensor]:
    """The plain state dict of an adapted one: each adapted projection's weight merged, its bias renamed, the
    adapters dropped. `lora`: the run's train.lora settings (r, alpha)."""
    scaling = float(lora["alpha"]) / int(lora["r"])
    out: dict[str, Tensor] = {}
    for key, value in state.items():
        if key.endswith((A, B)):
            continue
        if BASE not in key:
            out[key] = value
            continue
        owner, name = key.split(BASE)  # "…qkv_proj", "weight" | "bias"
        if name == "weight":
            down, up = state[owner + A], state[owner + B]  # (r, in), (out, r)
            value = (value.float() + scaling * (up.float() @ down.float())).to(value.dtype)
        out[f"{owner}.{name}"] = value
    return out
