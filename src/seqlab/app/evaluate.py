"""Evaluate a checkpoint with one decoding setting: `seqlab evaluate ckpt=PATH [decoding=beam]`.

Writes hypotheses.jsonl and metrics.json (atomically) under results_dir, logs the
metrics to a W&B run (one per setting, grouped per sweep). A failing setting is
recorded as failed, in metrics.json and in W&B; in a multirun the other jobs go on.
"""

from __future__ import annotations

import logging
import signal
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from seqlab.app.cli import reraise
from seqlab.app.configs import (
    JobLog,
    decoding_overrides,
    is_multirun,
    plain,
    sweep_group,
    tracking_values,
    typed,
)
from seqlab.app.infer import LANGUAGE_KEYS, InferenceRequest, Loaded, chosen_engine, load
from seqlab.app.store import CONF_DIR
from seqlab.config import ConfigError
from seqlab.data import CorpusConfig
from seqlab.data.prompting import PromptSettings
from seqlab.decoding import DecodingConfig
from seqlab.decoding.labels import run_label
from seqlab.decoding.mbr import check_task
from seqlab.inference.evaluation import EvalSettings, evaluate
from seqlab.inference.inspection import alignment_images
from seqlab.inference.prompts import corpus_of
from seqlab.inference.rescoring import Rescoring, finished_before
from seqlab.inference.testset import TestSet
from seqlab.memory import keep_freed_memory
from seqlab.metrics import declarations as M
from seqlab.metrics.neural import NeuralSettings, check_neural
from seqlab.metrics.text import check_metrics
from seqlab.tracking.results import FAILED, INTERRUPTED, OK, ResultDir, variant_key
from seqlab.tracking.wandb import (
    TrackingConfig,
    artifact_of,
    finish,
    log_images,
    log_predictions,
    make_logger,
    scalar_metrics,
    use_artifact,
)

log = logging.getLogger("seqlab.evaluate")


def decoding_config(cfg: DictConfig) -> DecodingConfig:
    values = plain(cfg.decoding)
    return typed(DecodingConfig, values, "decoding")


def setting_decoding(cfg: DictConfig) -> dict[str, Any]:
    """The decoding values that key a result folder; `mbr: null` is left out, so a setting without MBR keys
    the same folder as results written without the field (found, and skipped when finished)."""
    values = plain(cfg.decoding)
    return {k: v for k, v in values.items() if not (k == "mbr" and v is None)}


def other_corpus(cfg: DictConfig) -> CorpusConfig | None:
    """`corpus=NAME` (a file of conf/data) or `+corpus.kind=files ...` (a corpus config): a test set
    other than the checkpoint's own corpus; None when not given."""
    chosen = cfg.get("corpus")
    if chosen is None:
        return None
    if isinstance(chosen, str):
        path = Path(cfg.paths.root_dir) / "conf" / "data" / f"{chosen}.yaml"
        if not path.is_file():
            names = sorted(p.stem for p in path.parent.glob("*.yaml"))
            raise ConfigError(f"corpus={chosen}: no {path}; use one of {names} or a corpus config")
        values = OmegaConf.to_container(OmegaConf.load(path).corpus)
    else:
        values = plain(chosen)
    return typed(CorpusConfig, dict(values), "corpus")


DEFAULT_PROMPT = PromptSettings().to_dict()  # the sources as they are: a prompt asking that keys no folder


def setting_values(cfg: DictConfig) -> dict[str, Any]:
    """ResultDir.for_evaluation's arguments but the label, engine and test set, which key the setting's result
    folder with them: the decoding (or the checkpoint's own, with the command line's changes), the ensemble, the
    languages and how the sources were asked."""
    changed = decoding_overrides(cfg) if cfg.decoding_from_checkpoint else {}
    decoding = ({"checkpoint": changed} if changed else "checkpoint") if cfg.decoding_from_checkpoint \
        else setting_decoding(cfg)
    members = [str(c) for c in cfg.get("ensemble") or ()]
    ensemble = {"checkpoints": members, "rule": str(cfg.ensemble_rule)} if members else None
    languages = {k: plain(cfg[k]) for k in LANGUAGE_KEYS if cfg.get(k) is not None}
    if cfg.get("prompt") is not None and plain(cfg.prompt) != DEFAULT_PROMPT:
        languages["prompt"] = plain(cfg.prompt)  # how the sources were asked keys the folder too
    return {"root": Path(cfg.results_dir), "checkpoint": str(cfg.ckpt), "split": cfg.split, "limit": cfg.limit,
            "decoding": decoding, "precision": str(cfg.precision), "ensemble": ensemble,
            "languages": languages or None}


def setting_label(cfg: DictConfig, engine: str) -> tuple[InferenceRequest | None, str, ConfigError | None]:
    """The typed request and the setting's one label (InferenceRequest.label), or, for values that do not type,
    the error and a label from the raw method: the failure is then recorded in a folder of that name."""
    try:
        request = InferenceRequest.from_cfg(cfg, "eval", engine=engine)
    except ConfigError as err:
        raw = run_label(str(cfg.decoding.get("name") or cfg.decoding.get("method")), str(cfg.precision), engine,
                        len(cfg.get("ensemble") or ()), str(cfg.get("ensemble_rule")))
        return None, raw, err
    return request, request.label, None


def checkpoint_payload(info: Any) -> dict[str, Any]:
    """What metrics.json records of the evaluated checkpoint."""
    return {"path": str(info.path), "step": info.step, "git_revision": info.git_revision,
            "model": info.model_config.to_dict(), "run_name": info.run_config.get("run_name"),
            "seed": info.run_config.get("seed"), "variant": variant_key(info.run_config)}


@dataclass(frozen=True)
class EvalJob:
    """One `seqlab evaluate` setting, typed from its config before any data is read: the engine (auto chosen
    once), the test set, the typed request and its label (or the error of a value that does not type, recorded
    in the folder of that label), the result folder and the values that key it, how a finished setting is
    rescored, what evaluation decodes and scores, and where W&B logs."""

    engine: str
    tests: TestSet
    request: InferenceRequest | None
    label: str
    invalid: ConfigError | None
    out: ResultDir
    setting: dict[str, Any]
    rescoring: Rescoring
    settings: EvalSettings | None  # None where the request does not type
    tracking: TrackingConfig
    device: str
    cache_dir: Path
    inspect_sentences: int

    @classmethod
    def from_cfg(cls, cfg: DictConfig) -> EvalJob:
        """Every value read from the config first, then typed, the request before the rest."""
        engine = chosen_engine(cfg)  # engine=auto: chosen once; the folder, label, record and decoding name it
        request, label, invalid = setting_label(cfg, engine)
        keyed, corpus, tracking = setting_values(cfg), other_corpus(cfg), tracking_values(cfg)
        chosen = check_metrics(plain(cfg.get("metrics", list(M.default_choices()))))
        neural = NeuralSettings.from_mapping(plain(cfg.get("neural")))
        tests = TestSet(split=cfg.split, limit=cfg.limit, source=None if cfg.source is None else str(cfg.source),
                        references=tuple(str(r) for r in cfg.references or ()), corpus=corpus,
                        extra_references=tuple(cfg.extra_references or ()))
        settings = None if request is None else EvalSettings(
            split=cfg.split, limit=cfg.limit, max_tokens=cfg.max_tokens, score_references=cfg.score_references,
            ci_seed=cfg.ci_seed, n_bootstrap=cfg.n_bootstrap, precision=request.precision, metrics=chosen,
            neural=neural)
        rescoring = Rescoring(chosen, neural, bool(cfg.force), cfg.ci_seed, cfg.n_bootstrap)
        out, setting = ResultDir.for_evaluation(**keyed, label=label, engine=engine, test_set=tests.key())
        return cls(engine, tests, request, label, invalid, out, setting, rescoring, settings,
                   typed(TrackingConfig, tracking, "logger"), str(cfg.device), Path(cfg.paths.cache_dir),
                   int(cfg.inspect_sentences))


def run_evaluation(cfg: DictConfig) -> dict[str, Any]:
    """Evaluate, or skip a setting that already has results; failures are recorded, then re-raised."""
    keep_freed_memory()
    job = EvalJob.from_cfg(cfg)
    done = finished_before(job.out, job.rescoring)
    if done is not None:
        return done
    split = job.tests.split
    payload: dict[str, Any] = {"setting": job.setting, "label": job.label, "split": split}
    logger = None
    try:
        if job.invalid is not None:  # a bad value fails here, recorded in the setting's folder
            raise job.invalid
        assert job.request is not None and job.settings is not None
        request, corpus = job.request, job.tests.corpus
        if corpus is not None:
            check_task(request.decoding.mbr, corpus.task, f"corpus {corpus.name}")
        payload["decoding"] = request.decoding.to_dict()
        check_neural(job.rescoring.chosen, job.rescoring.neural, have_references=True)  # all test sets have them
        loaded = load(request, job.device, job.cache_dir, task_checked=corpus is not None, corpus=corpus, split=split)
        info, decoding = loaded.info, loaded.decoding
        describe(payload, loaded, request, job.setting, split)
        examples = job.tests.examples(corpus_of(info))
        logger = open_logger(cfg, job.tracking, job.out.path, loaded, payload, request.engine)
        payload["engine"] = request.engine
        records, metrics = evaluate(loaded.model, loaded.tokenizer, examples, decoding, job.settings, loaded.engine)
        rows = [r.to_dict() for r in records]
        job.out.write_hypotheses(rows)
        if decoding.mbr is not None:
            job.out.write_candidates([r.candidates_row() for r in records])
        payload.update(status=OK, metrics=metrics, settings=asdict(job.settings))
        if logger is not None:
            log_results(logger, job, metrics, rows, loaded)
        log.info("%s: %s", job.label, {k: round(v, 3) for k, v in metrics.items() if isinstance(v, float)})
        return payload
    except KeyboardInterrupt:
        payload.update(status=INTERRUPTED, error="interrupted (Ctrl-C or SIGTERM) before the end; run it again to "
                                                 "finish (finished settings are skipped)")
        log.error("evaluation interrupted (%s); recorded in %s", payload["label"], job.out.metrics_path)
        raise
    except Exception as err:
        payload.update(status=FAILED, error=f"{type(err).__name__}: {err}",
                       traceback=traceback.format_exc(limit=5))
        log.error("evaluation failed (%s): %s", payload["label"], payload["error"])
        log_failure(cfg, job.tracking, job.out.path, logger, payload)
        raise
    finally:
        job.out.write_metrics(payload)
        finish()


def describe(payload: dict[str, Any], loaded: Loaded, request: InferenceRequest, setting: dict[str, Any],
             split: str) -> None:
    """What a result records of what was decoded: the decoding (the request's, recorded before loading, unless
    the checkpoint's own defaults or the target language's forced first token changed it), the checkpoint, the
    prompt the sources were asked with (a fine-tuned model's own too), the ensemble, the test set."""
    if loaded.decoding is not request.decoding:
        payload["decoding"] = loaded.decoding.to_dict()
    payload["checkpoint"] = checkpoint_payload(loaded.info)
    if not loaded.prompt.asks_nothing:
        payload["prompt"] = loaded.prompt.to_dict()
    if request.ensemble:
        payload["ensemble"] = {"checkpoints": list(request.ensemble), "rule": request.ensemble_rule}
    payload["test_set"] = setting.get("test_set") or {"corpus": loaded.info.data_config["corpus"]["name"],
                                                      "split": split}


def log_failure(cfg: DictConfig, tracking: TrackingConfig, folder: Path, logger: Any, payload: dict[str, Any]
                ) -> None:
    """A failed setting's W&B run says so (one is opened for it if it failed before its run was)."""
    if logger is None and tracking.kind != "none":
        logger = make_logger(tracking, folder, f"failed/{payload['label']}", sweep_group(cfg),
                             {"setting": payload["setting"]}, job_type="sweep" if is_multirun() else "eval")
    if logger is not None and tracking.kind == "wandb":
        logger.experiment.summary["status"] = FAILED
        logger.experiment.summary["error"] = payload["error"]


def open_logger(cfg: DictConfig, tracking: TrackingConfig, folder: Path, loaded: Loaded, payload: dict[str, Any],
                engine: str) -> Any:
    """The setting's logger (a W&B run in the model's group, which uses the checkpoint's artifact); its config
    is what the result records (`describe`)."""
    info, checkpoint = loaded.info, payload["checkpoint"]
    group = cfg.logger.get("group") or info.tracking.get("group") or sweep_group(cfg)
    artifact = artifact_of(info.tracking, info.path)
    logger = make_logger(tracking, folder, f"{checkpoint['run_name']}/{payload['label']}", group,
                         {"eval": {**{k: v for k, v in plain(cfg).items() if k != "decoding"}, "engine": engine},
                          "decoding": payload["decoding"], "prompt": payload.get("prompt", DEFAULT_PROMPT),
                          "model": checkpoint["model"],
                          "checkpoint": checkpoint, "training_run_id": info.tracking.get("run_id"),
                          "checkpoint_artifact": artifact},
                         job_type="sweep" if is_multirun() else "eval")
    if artifact is not None and tracking.kind == "wandb":
        use_artifact(logger, artifact)
    return logger


def log_results(logger: Any, job: EvalJob, metrics: dict[str, Any], rows: list[dict[str, Any]],
                loaded: Loaded) -> None:
    """The metrics to the logger; with W&B also the predictions table and the first alignments (each over the
    hypothesis the evaluation recorded: nothing is decoded again)."""
    split = job.tests.split
    logger.log_metrics({f"{split}/{k}": v for k, v in scalar_metrics(metrics).items()})
    if job.tracking.kind == "wandb":
        log_predictions(logger, rows)
        shown = rows[: job.inspect_sentences] if loaded.model.attention_modules() else []  # an ensemble: no one map
        sources, hypotheses = [r["source"] for r in shown], [r["hypothesis"] for r in shown]
        log_images(logger, "attention",
                   alignment_images(loaded.model, loaded.tokenizer, sources, hypotheses, job.out.path),
                   [s[:80] for s in sources])
        for key, value in metrics.items():  # sacreBLEU's signatures: how each score was computed
            if key.endswith("_signature"):
                logger.experiment.summary[f"{split}/{key}"] = value
        logger.experiment.summary["status"] = OK
    else:
        logger.save()


JOBS = JobLog("evaluation sweep")  # this process's settings, for the summary at the end of a sweep


def interrupt_on_sigterm() -> None:
    """SIGTERM (a cluster's time limit, `kill`) ends an evaluation like Ctrl-C: recorded as interrupted."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="eval")
def main(cfg: DictConfig) -> None:
    label = str(cfg.decoding.get("name") or cfg.decoding.method)
    try:
        result = run_evaluation(cfg)
        JOBS.finished.append(f"{result.get('label', label)} ({result.get('status', OK)})")
    except Exception as err:
        JOBS.failed.append(f"{label}: {type(err).__name__}: {err}")
        if not is_multirun():
            reraise("evaluate", err)  # a single run fails loudly; in a sweep it is recorded and the rest go on


def run() -> int:
    """`seqlab evaluate`: one setting, or a sweep whose failures are summarized (exit status 1)."""
    interrupt_on_sigterm()
    main()
    return JOBS.summary()
