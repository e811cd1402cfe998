"""The LightningModule: label-smoothed CE, AdamW, warmup schedule, logging, NaN guard."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import Tensor

from seqlab.config import ConfigError
from seqlab.data.datamodule import Batch
from seqlab.model import ModelConfig, build_model
from seqlab.train.config import OptimConfig, TrainConfig
from seqlab.train.levers import checkpoint_layers, compile_layers, step_loss, use_compile_cache
from seqlab.train.lora import add_adapters, base_names
from seqlab.train.optim import adamw
from seqlab.train.schedule import lr_multiplier

log = logging.getLogger(__name__)


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or infinite loss."""


class Seq2SeqModule(L.LightningModule):
    """Trains a seqlab model (either architecture); the checkpoint carries everything needed to rebuild it."""

    def __init__(self, model_cfg: ModelConfig, optim: OptimConfig, train_cfg: TrainConfig | None = None,
                 seed: int = 0, meta: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.model_cfg, self.optim, self.train_cfg, self.seed = model_cfg, optim, train_cfg or TrainConfig(), seed
        self.model = build_model(model_cfg)
        if self.train_cfg.lora.enabled:  # before anything reads the parameters: the optimizer takes the adapters'
            trainable, total = add_adapters(self.model, self.train_cfg.lora)
            log.info("train.lora: %s of %s parameters trainable (r=%d, targets=%s)", f"{trainable:,}", f"{total:,}",
                     self.train_cfg.lora.r, self.train_cfg.lora.targets)
        if self.train_cfg.activation_checkpointing:
            checkpoint_layers(self.model)
        self.meta = meta or {}  # tokenizer, data config, resolved run config
        self.skipped_batches = 0
        self._last_time: float | None = None
        self._compile_start: float | None = None  # train.compile: when compiling began, until the first step ends

    # -- training ---------------------------------------------------------------------------
    def on_fit_start(self) -> None:
        drops = {k: getattr(self.model_cfg, k) for k in ("encoder_layerdrop", "decoder_layerdrop")
                 if getattr(self.model_cfg, k)}
        if drops and self.trainer.world_size > 1:  # before any step: a hang or DDP's unused-parameter error later
            raise ConfigError(f"{', '.join(f'model.{k}={v}' for k, v in drops.items())}: each of the "
                              f"{self.trainer.world_size} processes would skip its own random layers (DDP's "
                              "gradients and FSDP's gathers need the same layers on every rank); train on one "
                              "device, or set them to 0")
        if self.train_cfg.compile != "none":
            use_compile_cache()
            n = compile_layers(self.model) if self.train_cfg.compiles_layers else 0
            self._compile_start = time.perf_counter()
            log.info("train.compile=%s: %d layers%s compiled on first use (the first steps include the compile "
                     "time, which is logged apart)", self.train_cfg.compile, n,
                     " and the loss" if self.train_cfg.compiles_loss else "")

    def on_train_batch_end(self, outputs: Any, batch: Batch, batch_idx: int) -> None:
        if (started := self._compile_start) is not None:
            self._compile_start = None
            seconds = time.perf_counter() - started
            log.info("first training step, compile included: %.1f s", seconds)
            self.log("train/first_step_s", seconds)

    def on_train_batch_start(self, batch: Batch, batch_idx: int) -> None:
        # Dropout randomness is a function of (seed, epoch, batch, rank), so a resumed run
        # draws exactly the masks an uninterrupted run would have drawn.
        torch.manual_seed(hash((self.seed, self.current_epoch, batch_idx, self.global_rank)) % (2**63))

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor | None:
        loss_sum, nll_sum, n_tgt = self._loss(batch, self.train_cfg.bf16_weights)
        loss = loss_sum / n_tgt
        if not torch.isfinite(loss):
            if self.train_cfg.nan_policy == "skip":
                self.skipped_batches += 1
                self.log("train/skipped_batches", float(self.skipped_batches))
                log.warning("non-finite loss at step %d; batch skipped (%d so far)", self.global_step,
                            self.skipped_batches)
                return None
            raise NonFiniteLossError(self._nan_message())
        now = time.perf_counter()
        if self._last_time is not None:
            self.log("train/tokens_per_s", batch.n_tokens / max(now - self._last_time, 1e-9))
        self._last_time = now
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/nll", nll_sum / n_tgt)
        self.log("train/lr", self.trainer.optimizers[0].param_groups[0]["lr"])
        return loss

    def _loss(self, batch: Batch, bf16: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """`bf16`: the training step's bf16 weights (train.bf16_weights); validation scores the checkpoint's
        model as evaluation decodes it, under autocast."""
        return step_loss(self.model, batch.src_ids, batch.src_pad_mask, batch.tgt_in, batch.tgt_out,
                         self.optim.label_smoothing, self.train_cfg.fused_loss, self.train_cfg.compiles_loss, bf16,
                         batch.tgt_keep)

    def _nan_message(self) -> str:
        found = {Path(p) for cb in self.trainer.checkpoint_callbacks for p in (cb.best_model_path, cb.last_model_path)
                 if p and Path(p).exists()}
        saved = ", ".join(sorted(str(p) for p in found)) or "none yet"
        return (f"non-finite loss at step {self.global_step}; training stopped. Last good checkpoints: {saved}. "
                "Resume from one with a lower optim.lr, or set train.nan_policy=skip to skip such batches.")

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        self.log("train/grad_norm", torch.nn.utils.get_total_norm(grads))  # before clipping

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        """Lightning's clipping hook, so gradients are clipped once: the Trainer's `gradient_clip_val`
        when set, else `optim.clip_norm` (by global norm, as fairseq's --clip-norm).

        Only fp16 has a loss scaler; there Lightning unscales the gradients before this hook, and its own
        `clip_gradients` clips them. Without one (fp32, bf16-mixed) the gradients are clipped here with
        the same torch call, because Lightning's mixed-precision plugin refuses to clip for any fused
        optimizer, even in bf16-mixed, where there is no scaling to undo.
        """
        value = gradient_clip_val if gradient_clip_val is not None else self.optim.clip_norm
        if value is None:
            return
        algorithm = gradient_clip_algorithm or "norm"
        if getattr(self.trainer.precision_plugin, "scaler", None) is not None:
            self.clip_gradients(optimizer, gradient_clip_val=value, gradient_clip_algorithm=algorithm)
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, value)
        else:
            torch.nn.utils.clip_grad_norm_(params, value)

    def configure_optimizers(self) -> dict[str, Any]:
        decay, no_decay = [], []
        for name, p in self.model.named_parameters():
            if p.requires_grad:  # with train.lora, the adapters only
                (no_decay if p.ndim < 2 or "norm" in name else decay).append(p)
        precision = str(self.trainer.precision)
        opt = adamw([{"params": decay, "weight_decay": self.optim.weight_decay},
                     {"params": no_decay, "weight_decay": 0.0}],
                    lr=self.optim.lr, betas=tuple(self.optim.betas), eps=self.optim.eps, fused=self.optim.fused,
                    precision=precision)
        max_steps = self.trainer.max_steps if self.trainer and self.trainer.max_steps > 0 else None
        mult = lr_multiplier(self.optim.schedule, self.optim.warmup_steps, max_steps, self.optim.min_lr_ratio,
                             self.optim.warmup_ramp)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: mult(k + 1))  # update k+1 uses mult(k+1)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # -- validation -------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self._val_sums = torch.zeros(3, dtype=torch.float64)

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        loss_sum, nll_sum, n_tgt = self._loss(batch)
        self._val_sums += torch.stack([loss_sum.double(), nll_sum.double(), n_tgt.double()]).cpu()

    def on_validation_epoch_end(self) -> None:
        sums = self.trainer.strategy.reduce(self._val_sums.to(self.device), reduce_op="sum").cpu()
        loss, nll = (sums[:2] / sums[2].clamp(min=1)).tolist()
        self.log("val/loss", loss, prog_bar=True, sync_dist=False)
        self.log("val/nll", nll)
        self.log("val/ppl", math.exp(min(nll, 50.0)))

    # -- checkpoints ------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["seqlab"] = {
            "model_config": self.model_cfg.to_dict(),
            "optim_config": asdict(self.optim),
            "train_config": asdict(self.train_cfg),
            "seed": self.seed,
            "step": self.global_step,
            "skipped_batches": self.skipped_batches,
            **self.meta,
        }
        if self.train_cfg.lora.enabled:  # the adapters are kept apart: what merging them needs (model.adapters)
            checkpoint["seqlab"]["lora"] = asdict(self.train_cfg.lora)

    def load_base_weights(self, state: dict[str, Tensor]) -> None:
        """Start from a plain state dict (`train.init_from`'s model): with adapters, into their frozen base
        weights; every weight of the model must be there (the adapters start as peft initializes them)."""
        if self.train_cfg.lora.enabled:
            missing, unexpected = self.model.load_state_dict(base_names(self.model, state), strict=False)
            if unexpected or any(".lora_" not in k for k in missing):
                raise RuntimeError(f"the model to fine-tune does not fit: missing {missing[:5]}, unexpected "
                                   f"{unexpected[:5]}")
        else:
            self.model.load_state_dict(state)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.skipped_batches = checkpoint.get("seqlab", {}).get("skipped_batches", 0)
