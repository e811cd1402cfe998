"""Fully sharded data parallel training (`trainer=fsdp`): Lightning's FSDPStrategy with each encoder and decoder
layer a wrapping unit (its parameters, gradients and optimizer state sharded across the ranks, gathered for its
forward and backward only) and checkpoints written whole, as one file on rank 0 (`state_dict_type="full"`), which
every seqlab command reads as it reads any other."""

from __future__ import annotations

from typing import Any

from seqlab.config import ConfigError
from seqlab.train.config import TrainConfig

TARGET = "seqlab.train.fsdp.strategy"  # what conf/trainer/fsdp.yaml's strategy instantiates


def strategy(**kwargs: Any) -> Any:
    """FSDPStrategy wrapping each layer; `kwargs` go to it (sharding_strategy, cpu_offload, ...)."""
    from lightning.pytorch.strategies import FSDPStrategy

    from seqlab.model.transformer import DecoderLayer, EncoderLayer

    return FSDPStrategy(auto_wrap_policy={EncoderLayer, DecoderLayer}, state_dict_type="full", **kwargs)


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
