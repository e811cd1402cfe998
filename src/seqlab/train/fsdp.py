"""Fully sharded data parallel training (`trainer=fsdp`): Lightning's FSDPStrategy with each encoder and decoder
layer a wrapping unit (its parameters, gradients and optimizer state sharded across the ranks, gathered for its
forward and backward only) and checkpoints written whole, as one file on rank 0 (`state_dict_type="full"`), which
every seqlab command reads as it reads any other.

The wrapping units are declared here once (`units`), for Lightning's strategy and for torch's own FSDP (`shard`,
with `full_state` for the one-file state), which also runs on CPU processes over gloo where Lightning refuses a CPU
accelerator: the slow suite trains through it on two processes (tests/integration/test_fsdp_gloo.py)."""

from __future__ import annotations

from typing import Any

from seqlab.config import ConfigError
from seqlab.train.config import TrainConfig

TARGET = "seqlab.train.fsdp.strategy"  # what conf/trainer/fsdp.yaml's strategy instantiates


def units() -> set[type]:
    """The wrapping units: each encoder and decoder layer (a one-stack model's layers are encoder layers)."""
    from seqlab.model.transformer import DecoderLayer, EncoderLayer

    return {EncoderLayer, DecoderLayer}


def strategy(**kwargs: Any) -> Any:
    """FSDPStrategy wrapping each layer; `kwargs` go to it (sharding_strategy, cpu_offload, ...)."""
    from lightning.pytorch.strategies import FSDPStrategy

    return FSDPStrategy(auto_wrap_policy=units(), state_dict_type="full", **kwargs)


def shard(model: Any, device: Any = None) -> Any:
    """`model` under torch's FullyShardedDataParallel with seqlab's wrapping units, on `device` (a CPU process
    of a gloo group, or its GPU); the process group must be initialized."""
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    return FullyShardedDataParallel(model, auto_wrap_policy=ModuleWrapPolicy(units()),
                                    device_id=device or torch.device("cpu"))


def full_state(sharded: Any) -> dict[str, Any]:
    """The whole model's state dict in the unwrapped model's names, on every rank (what a checkpoint holds,
    `state_dict_type="full"`): the parameters summoned whole and copied, FSDP's wrapper names removed."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    prefix = "_fsdp_wrapped_module."
    with FullyShardedDataParallel.summon_full_params(sharded, writeback=False):
        state = sharded.module.state_dict()
        return {k.replace(prefix, ""): v.detach().clone() for k, v in state.items()}


def is_fsdp(trainer_cfg: Any) -> bool:
    """Whether a composed `trainer` group trains with `strategy` (trainer=fsdp)."""
    chosen = trainer_cfg.get("strategy") if hasattr(trainer_cfg, "get") else None
    return hasattr(chosen, "get") and chosen.get("_target_") == TARGET


def check_fsdp(train: TrainConfig, accelerator: str, cuda: bool) -> None:
    """Fail, naming the key, where FSDP does not run here: Lightning's FSDPStrategy takes GPUs only
    (`accelerator`: the trainer's, `cuda`: whether torch sees a GPU); the quick validation decode runs on rank 0
    alone, where FSDP's gathering of the weights is every rank's collective; the other levers are not tested
    with it."""
    if accelerator == "cpu" or (accelerator == "auto" and not cuda):
        raise ConfigError(f"trainer=fsdp with trainer.accelerator={accelerator}: Lightning's FSDPStrategy runs on "
                          "CUDA GPUs only" + ("" if cuda else " and torch sees none here")
                          + "; on CPUs train with trainer=ddp")
    if train.quick_eval_size > 0:
        raise ConfigError(f"trainer=fsdp shards the weights across the ranks, and the quick validation decode "
                          f"(train.quick_eval_size={train.quick_eval_size}) runs on rank 0 alone: set "
                          "train.quick_eval_size=0 and evaluate the checkpoints with seqlab evaluate")
    for key, on in (("lora.r", train.lora.enabled), ("activation_checkpointing", train.activation_checkpointing),
                    ("bf16_weights", train.bf16_weights), ("compile", train.compile != "none"),
                    ("fused_loss", train.fused_loss)):
        if on:
            raise ConfigError(f"trainer=fsdp with train.{key} is not tested together; turn train.{key} off "
                              "or train with trainer=ddp")
