"""Train one model: `seqlab train [experiment=NAME] [key=value ...]` (Hydra)."""

from __future__ import annotations

import logging
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig

from seqlab.app.cli import reraise
from seqlab.app.configs import JobLog, TrainSpec, is_multirun, job_name, plain, sweep_group, train_spec
from seqlab.app.store import CONF_DIR
from seqlab.bf16_gemm import bf16_gemms
from seqlab.checkpoint import (
    LAST,
    atomic_checkpoint_io,
    checkpoint_file,
    checkpoint_meta,
    load_for_inference,
    read_checkpoint,
    remove_stale_temporaries,
    run_dir_of,
)
from seqlab.config import ConfigError
from seqlab.data import Seq2SeqDataModule
from seqlab.data.config import DataConfig
from seqlab.hardware import auto_precision
from seqlab.inference.prompts import completions
from seqlab.memory import keep_freed_memory
from seqlab.model import ModelConfig
from seqlab.tracking.wandb import finish, make_logger, metric_history, saved_run_id, scrub
from seqlab.train.fit import (
    FinalCheckpoint,
    GracefulStop,
    ProgressLog,
    RunFolderLock,
    check_fresh_start,
    checkpoint_callbacks,
    find_resume,
)
from seqlab.train.fsdp import check_fsdp, is_fsdp
from seqlab.train.levers import check_bf16_weights
from seqlab.train.module import Seq2SeqModule
from seqlab.train.quick_eval import QuickEval

log = logging.getLogger("seqlab.train")


def train(cfg: DictConfig) -> dict[str, Any]:
    """Validate the config, prepare data, fit, and return final metrics and checkpoint paths."""
    spec = train_spec(cfg)  # fails here, before any data is read, on a bad key or value
    if is_fsdp(cfg.trainer):
        check_fsdp(spec.train, str(cfg.trainer.get("accelerator")), torch.cuda.is_available())
    keep_freed_memory()
    out_dir = Path(cfg.paths.output_dir)
    if rank_zero_only.rank > 0:  # a further rank that Lightning (or SLURM, torchrun) started: rank 0 holds the folder
        return _train_locked(cfg, spec, out_dir)
    with RunFolderLock(out_dir):
        remove_stale_temporaries(checkpoint_file(out_dir).parent)
        return _train_locked(cfg, spec, out_dir)


def check_lengths(data: DataConfig, model: ModelConfig) -> None:
    """Sequences the data keeps must fit the model's positions (a pretrained model fixes them); a one-stack
    model reads source and target as one sequence."""
    if model.layout.one_sequence:
        total = data.max_source_len + data.max_target_len
        if total > model.max_positions:
            raise ConfigError(f"data.max_source_len + data.max_target_len = {total} does not fit model.max_positions="
                              f"{model.max_positions}: model.architecture={model.architecture} reads source and "
                              "target as one sequence; lower them or raise model.max_positions")
        return
    for key in ("max_source_len", "max_target_len"):  # the decoder reads start + target[:-1]: as many
        if getattr(data, key) > model.max_positions:
            raise ConfigError(f"data.{key}={getattr(data, key)} does not fit the model's max_positions="
                              f"{model.max_positions}; lower data.{key}")


def extra_callbacks(cfg: DictConfig) -> list[Any]:
    """The callbacks the `callbacks` config group adds (EarlyStopping, LearningRateMonitor, ...)."""
    chosen = cfg.get("callbacks") or {}
    return [hydra.utils.instantiate(chosen[name]) for name in chosen if chosen[name] and "_target_" in chosen[name]]


def auto_trainer_precision(cfg: DictConfig, spec: TrainSpec) -> str | None:
    """trainer.precision=auto resolved for this machine (None: the config names one), before data is read."""
    if str(cfg.trainer.get("precision")) != "auto":
        return None
    precision, why = auto_precision(str(cfg.trainer.get("accelerator", "cpu")))
    log.info("trainer.precision=auto -> %s (%s); set trainer.precision to choose", precision, why)
    check_bf16_weights(spec.train.bf16_weights, precision, f"auto: {why}")
    return precision


def trainer_arguments(cfg: DictConfig, spec: TrainSpec, out_dir: Path, loggers: list[Any], quick_eval: list[Any],
                      precision: str | None) -> dict[str, Any]:
    """What seqlab adds to the `trainer` group: callbacks, loggers, the atomic checkpoint writer, validation
    by steps, and `auto`'s precision."""
    bar = cfg.trainer.get("enable_progress_bar")
    bar = sys.stderr.isatty() if bar is None else bool(bar)  # a bar on a terminal; ETA log lines otherwise
    arguments = dict(
        enable_progress_bar=bar,
        callbacks=[*checkpoint_callbacks(out_dir, spec.train.checkpoint_every_n_steps, spec.train.monitor,
                                         spec.train.monitor_mode, spec.train.keep_last_checkpoints),
                   *([] if bar else [ProgressLog(cfg.trainer.log_every_n_steps)]),
                   GracefulStop(checkpoint_file(out_dir, LAST)),
                   FinalCheckpoint(checkpoint_file(out_dir, LAST)), *quick_eval, *extra_callbacks(cfg)],
        logger=loggers or False,
        plugins=[atomic_checkpoint_io()],
        default_root_dir=str(out_dir),
        val_check_interval=spec.train.val_every_n_steps,
        check_val_every_n_epoch=None,
        use_distributed_sampler=False,  # the token-budget sampler shards by rank itself
    )
    if precision is not None:
        arguments["precision"] = precision
    return arguments


def shared_tokenizer(spec: TrainSpec) -> Any:
    """`train.tokenizer_from`'s tokenizer (a student trained on its teacher's), or None: one learned here."""
    if not spec.train.tokenizer_from:
        return None
    shared = load_for_inference(spec.train.tokenizer_from)[1]
    log.info("the tokenizer of %s (vocabulary %d), not one learned from the corpus", spec.train.tokenizer_from,
             shared.tgt_vocab_size)
    return shared


def _train_locked(cfg: DictConfig, spec: TrainSpec, out_dir: Path) -> dict[str, Any]:
    precision = auto_trainer_precision(cfg, spec)
    runs_root = Path(cfg.paths.log_dir) / cfg.task_name / cfg.run_name
    ckpt_path = find_resume(spec.train.resume, runs_root, out_dir)
    check_fresh_start(out_dir, ckpt_path, spec.train.overwrite)
    if ckpt_path is not None:
        remove_stale_temporaries(Path(ckpt_path).parent)
    L.seed_everything(cfg.seed, workers=True, verbose=False)

    init = load_for_inference(spec.train.init_from) if spec.train.init_from else None
    check_lengths(spec.data, init[0].cfg if init else spec.model)  # before the data is prepared
    shared = shared_tokenizer(spec)
    completes = init is not None and init[0].layout.continues_prompt  # supervised fine-tuning of a causal LM
    if not spec.prompt.asks_nothing and not completes:
        raise ConfigError("prompt.* asks an imported causal LM its corpus; this run trains a model that reads its "
                          "source (train.init_from names none, or an encoder-decoder): remove the prompt keys")
    tokenizer = completions(init[1], spec.prompt, spec.data) if completes else init[1] if init else shared
    datamodule = Seq2SeqDataModule(spec.data, tokenizer=tokenizer, prompted=completes)
    datamodule.setup()
    tok = datamodule.tokenizer
    if init is not None:
        model_cfg = init[0].cfg  # its decoder start the tokenizer's (checkpoint.start_from)
        log.info("fine-tuning %s (%s): its model and tokenizer; the model group is not used",
                 spec.train.init_from, init[2].run_config.get("run_name", "?"))
    else:
        model_cfg = replace(spec.model, src_vocab_size=tok.src_vocab_size,
                            tgt_vocab_size=None if tok.joint else tok.tgt_vocab_size)
    check_lengths(spec.data, model_cfg)
    resolved = scrub(plain(cfg))
    group = sweep_group(cfg)
    resumed_id = saved_run_id(run_dir_of(ckpt_path)) if ckpt_path is not None else None  # continue that W&B run
    resumed_at = int(read_checkpoint(ckpt_path)["global_step"]) if ckpt_path is not None else None
    logger = make_logger(spec.tracking, out_dir, job_name(cfg), group, resolved, job_type="train", run_id=resumed_id,
                         resumed_at=resumed_at)
    tracking = {"group": spec.tracking.group or group,
                "run_id": logger.experiment.id if spec.tracking.kind == "wandb" else None,
                "log_checkpoints": spec.tracking.kind == "wandb" and spec.tracking.log_checkpoints}
    meta = checkpoint_meta(tok, spec.data.to_dict(), resolved, tracking)
    if completes:
        meta["prompt"] = spec.prompt.to_dict()  # evaluate and translate ask the fine-tuned model the same way
    if init is not None:
        meta["decoding"] = init[2].decoding  # the pretrained model's generation defaults travel with it
    module = Seq2SeqModule(model_cfg, spec.optim, spec.train, seed=cfg.seed, meta=meta)
    if init is not None and ckpt_path is None:  # a fresh start takes the pretrained weights; a resume its own
        module.load_base_weights(init[0].state_dict())
    quick_eval = [QuickEval.from_datamodule(datamodule, spec.train)] if spec.train.quick_eval_size > 0 else []

    loggers = [logger, metric_history(out_dir, resumed_at)] if spec.tracking.kind == "wandb" else [logger]
    trainer: L.Trainer = hydra.utils.instantiate(cfg.trainer, **trainer_arguments(
        cfg, spec, out_dir, [lg for lg in loggers if lg is not None], quick_eval, precision))
    try:
        with bf16_gemms(trainer.strategy.root_device.type, "bf16" in str(trainer.precision)):
            trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
    finally:
        finish()
    return finished(trainer, out_dir)


def finished(trainer: L.Trainer, out_dir: Path) -> dict[str, Any]:
    """A training's result: its last metrics, its best and last checkpoints, its step, and the signal that
    stopped it before its end (`stopped`: "SIGTERM", "SIGINT"; None: it ran to its end)."""
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    best, last = trainer.checkpoint_callbacks[:2]
    stopped = next((c.requested for c in trainer.callbacks if isinstance(c, GracefulStop)), None)
    if stopped is None:
        log.info("finished at step %d: %s", trainer.global_step, metrics)
    else:
        log.warning("stopped by %s at step %d, before the end: %s holds it; the same command resumes from it "
                    "(train.resume=auto, or train.resume=PATH)", stopped, trainer.global_step,
                    checkpoint_file(out_dir, LAST))
    return {"metrics": metrics, "best": best.best_model_path, "last": last.last_model_path or
            str(checkpoint_file(out_dir, LAST)), "step": trainer.global_step, "output_dir": str(out_dir),
            "stopped": stopped}


JOBS = JobLog("training multirun")


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="train")
def main(cfg: DictConfig) -> float | None:
    try:
        result = train(cfg)
    except Exception as err:
        if not is_multirun():
            reraise("train", err)  # a single run fails loudly; in a multirun the other jobs go on
        JOBS.failed.append(f"{job_name(cfg)}: {type(err).__name__}: {err}")
        log.exception("training failed: %s", JOBS.failed[-1])
        return None
    if result["stopped"] is not None:  # not finished: the exit status says so (a pipeline must not archive it)
        JOBS.stopped.append(result["stopped"])
        return None
    JOBS.finished.append(job_name(cfg))
    return result["metrics"].get("val/loss")  # the value a Hydra sweeper would optimize


def run() -> int:
    """`seqlab train`: one run, or a multirun whose failures are summarized (exit status 1); a run stopped by
    a signal before its end exits 128 + the signal's number (143 for SIGTERM), as a shell reports it."""
    main()
    return JOBS.summary()


if __name__ == "__main__":  # a DDP or FSDP rank that Lightning starts (app.main.relaunch_as)
    sys.exit(run())
