"""Typed settings of the training loop (optimizer, schedule, loss, checkpoints, failures)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from seqlab.config import ConfigError, check_choice, check_types, typed
from seqlab.train.schedule import Schedule

NanPolicy = Literal["stop", "skip"]
MonitorMode = Literal["min", "max"]
Compile = Literal["none", "layers", "loss", "all"]
LoraTargets = Literal["attention", "ffn", "all"]


@dataclass(frozen=True)
class LoraConfig:
    """Low-rank adapters (Hu et al. 2021, "LoRA") through peft: each targeted projection W keeps its weights
    frozen and learns W + (alpha / r) B A, B (out, r) starting at zero, A (r, in); everything else is frozen
    (embeddings, norms, the output layer). r=0: off, every weight trained. targets: attention (the query, key,
    value and output projections), ffn (both feed-forward layers) or all. The checkpoint keeps the adapter
    apart from the frozen weights; decoding and every export read the merged model (`model.adapters`)."""

    r: int = 0
    alpha: float = 16.0
    dropout: float = 0.0  # on the adapter's input (peft's lora_dropout)
    targets: LoraTargets = "attention"

    def __post_init__(self) -> None:
        check_types(self, "train.lora")
        check_choice("train.lora", "targets", self.targets, LoraTargets)
        if self.r < 0:
            raise ConfigError(f"train.lora.r={self.r} must be >= 0 (0: no adapters)")
        if self.alpha <= 0:
            raise ConfigError(f"train.lora.alpha={self.alpha} must be positive")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"train.lora.dropout={self.dropout} must be in [0, 1)")

    @property
    def enabled(self) -> bool:
        return self.r > 0


@dataclass(frozen=True)
class OptimConfig:
    """AdamW with warmup and a decaying schedule; label-smoothed loss; clipping."""

    lr: float = 5e-4
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-8
    weight_decay: float = 1e-4
    schedule: Schedule = "inverse_sqrt"
    warmup_steps: int = 4000
    # false: no warm-up ramp, the peak rate from the first update, the schedule after `warmup_steps`
    # unchanged (inverse_sqrt still decays as sqrt(warmup_steps / step)): the warm-up ablation that changes
    # nothing else. warmup_steps=0 would also rescale inverse_sqrt's decay (sqrt(1 / step), 22x lower at
    # step 500 than with 500 warm-up steps).
    warmup_ramp: bool = True
    min_lr_ratio: float = 0.0
    label_smoothing: float = 0.1
    clip_norm: float | None = 1.0
    fused: bool | None = None  # AdamW's fused kernel; None = where torch has one (`seqlab.train.optim`)

    def __post_init__(self) -> None:
        check_types(self, "optim")
        check_choice("optim", "schedule", self.schedule, Schedule)
        if self.lr <= 0:
            raise ConfigError(f"optim.lr={self.lr} must be positive")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"optim.label_smoothing={self.label_smoothing} must be in [0, 1)")
        if self.warmup_steps < 0:
            raise ConfigError(f"optim.warmup_steps={self.warmup_steps} must be >= 0")
        if self.clip_norm is not None and self.clip_norm <= 0:
            raise ConfigError(f"optim.clip_norm={self.clip_norm} must be positive, or null for no clipping")


@dataclass(frozen=True)
class TrainConfig:
    """The `train:` group: resuming, checkpoints, validation, NaN handling, the quick validation decode."""

    resume: str | None = None  # None | "auto" (this run folder, else the newest run of this name) | a path
    # fine-tuning: start from this checkpoint (seqlab's own or imported: `seqlab import`), with its model,
    # weights, tokenizer (not retrained) and decoding defaults; the `model` group is not used. A resumed run
    # continues from its own checkpoint as any other.
    init_from: str | None = None
    # train a new model (the `model` group's) with this checkpoint's tokenizer instead of one learned from the
    # corpus: a student that shares its teacher's vocabulary (and can draft for it in speculative decoding)
    tokenizer_from: str | None = None
    overwrite: bool = False  # start fresh in a run folder that already holds checkpoints
    checkpoint_every_n_steps: int = 200  # 0 = only the final (and best) checkpoint
    keep_last_checkpoints: int = 0  # also keep the N newest periodic checkpoints (step-*.ckpt), e.g. to average
    monitor: str = "val/loss"  # the logged metric that picks best.ckpt, e.g. val/greedy_bleu
    monitor_mode: MonitorMode = "min"
    val_every_n_steps: int = 500
    nan_policy: NanPolicy = "stop"
    quick_eval_size: int = 200  # validation examples decoded greedily for BLEU/ROUGE; 0 = off
    quick_eval_max_len: int = 128
    # Speed levers (docs/performance.md, "Training levers"); each keeps the loss and gradients of the plain
    # step up to rounding. fused_loss: the output projection and the label-smoothed loss a block of rows at a
    # time, the (tokens, vocabulary) logits never whole (`seqlab.train.output_loss`); compile: "layers"
    # compiles each encoder and decoder layer with torch.compile (regional: one compile per layer type,
    # cached between runs), "loss" the fused loss's arithmetic on each block of logits (with fused_loss),
    # "all" both, "none" runs everything eagerly. bf16_weights: the step in bf16 throughout, on a bf16 copy of
    # the weights made once per step, without autocast's casts; the parameters stay fp32, the optimizer's
    # master weights (`seqlab.train.levers.bf16_weights`; with trainer.precision=bf16-mixed).
    fused_loss: bool = False
    compile: Compile = "none"
    bf16_weights: bool = False
    # activation checkpointing per layer: each layer's activations recomputed in the backward instead of kept
    # (`seqlab.train.levers.checkpoint_layers`); the same gradients, less memory, one more forward a step
    activation_checkpointing: bool = False
    lora: LoraConfig = field(default_factory=LoraConfig)  # train.lora.r=8 trains low-rank adapters only

    def __post_init__(self) -> None:
        if isinstance(self.lora, dict):  # from a composed config or a checkpoint's record
            object.__setattr__(self, "lora", typed(LoraConfig, dict(self.lora), "train.lora"))
        check_types(self, "train")
        check_choice("train", "nan_policy", self.nan_policy, NanPolicy)
        check_choice("train", "compile", self.compile, Compile)
        if self.init_from is not None and self.tokenizer_from is not None:
            raise ConfigError("train.tokenizer_from: train.init_from already brings its checkpoint's tokenizer; "
                              "set one of them")
        if self.compiles_loss and not self.fused_loss:
            raise ConfigError(f"train.compile={self.compile} compiles the fused loss's arithmetic; set "
                              "train.fused_loss=true too, or train.compile=layers")
        if self.lora.enabled and (self.bf16_weights or self.compiles_layers):
            raise ConfigError(f"train.lora.r={self.lora.r} trains peft's adapter layers, which "
                              f"train.bf16_weights={self.bf16_weights} and train.compile={self.compile} do not "
                              "cover here: turn those off")
        if self.activation_checkpointing and self.compiles_layers:
            raise ConfigError(f"train.activation_checkpointing=true with train.compile={self.compile}: compiled "
                              "layers are not checkpointed here; set one of them")
        check_choice("train", "monitor_mode", self.monitor_mode, MonitorMode)
        if self.monitor.startswith("val/greedy_") and self.quick_eval_size == 0:
            raise ConfigError(f"train.monitor={self.monitor} is logged by the quick validation decode, which "
                              "train.quick_eval_size=0 turns off; raise quick_eval_size or monitor val/loss")
        for name, low in (("checkpoint_every_n_steps", 0), ("keep_last_checkpoints", 0), ("val_every_n_steps", 1),
                          ("quick_eval_size", 0),
                          ("quick_eval_max_len", 1)):
            if getattr(self, name) < low:
                raise ConfigError(f"train.{name}={getattr(self, name)} must be >= {low}")

    @property
    def compiles_layers(self) -> bool:
        return self.compile in ("layers", "all")

    @property
    def compiles_loss(self) -> bool:
        return self.compile in ("loss", "all")
