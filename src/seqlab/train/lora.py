"""Low-rank adapters on a seqlab model through peft (train.lora; `LoraConfig`): injected in place into the
model's projections by module name, everything else frozen. peft is an extra (`pip install seqlab[lora]`),
imported only here and only when adapters are asked for."""

from __future__ import annotations

from torch import nn

from seqlab.config import ConfigError
from seqlab.model import Model
from seqlab.model.adapters import BASE
from seqlab.train.config import LoraConfig

TARGETS = {"attention": ("qkv_proj", "q_proj", "kv_proj", "out_proj"), "ffn": ("fc1", "fc2")}


def target_modules(model: Model, targets: str) -> list[str]:
    """The full names of the model's nn.Linear projections `targets` names (attention | ffn | all)."""
    wanted = TARGETS["attention"] + TARGETS["ffn"] if targets == "all" else TARGETS[targets]
    return [name for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in wanted]


def add_adapters(model: Model, cfg: LoraConfig) -> tuple[int, int]:
    """Inject LoRA adapters into `model` in place (its targeted projections gain `base_layer` and the
    adapters, under peft's names); freeze every other weight. Returns (trainable, all) parameter counts."""
    try:
        from peft import LoraConfig as PeftLoraConfig
        from peft import inject_adapter_in_model
    except ImportError:
        raise ConfigError("train.lora.r > 0 trains adapters through peft, which is not installed: "
                          "pip install 'seqlab[lora]' (or peft), or set train.lora.r=0") from None
    names = target_modules(model, cfg.targets)
    if not names:
        raise ConfigError(f"train.lora.targets={cfg.targets}: the model has no such projection")
    inject_adapter_in_model(PeftLoraConfig(r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
                                           target_modules=names, bias="none"), model)
    for name, p in model.named_parameters():
        p.requires_grad_(".lora_" in name)
    return (sum(p.numel() for p in model.parameters() if p.requires_grad),
            sum(p.numel() for p in model.parameters()))


def base_names(model: Model, plain: dict) -> dict:
    """A plain state dict (`build_model`'s names: a checkpoint to fine-tune from) under the adapted model's
    names: each adapted projection's weight and bias under its `base_layer`."""
    own = set(model.state_dict())
    out = {}
    for key, value in plain.items():
        owner, _, name = key.rpartition(".")
        adapted = f"{owner}{BASE}{name}"
        out[adapted if adapted in own else key] = value
    return out
