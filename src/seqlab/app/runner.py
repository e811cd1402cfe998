"""Running a pipeline: each stage's resolved config and digest, skipping what the archive holds, archiving
each result with its manifest the moment it lands. A failed stage is never marked done.

A stage runs in outputs/pipelines/<command>-<digest>/ and leaves its record there too (record.json), so a
second experiment that shares the stage copies the record instead of running it again. A training cut off
(a session's end, SIGTERM) resumes from that folder's last checkpoint."""

from __future__ import annotations

import contextlib
import copy
import fnmatch
import functools
import hashlib
import json
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from seqlab.app.frozen_keys import FROZEN_KEYS
from seqlab.app.store import CONF_DIR
from seqlab.checkpoint import LAST, CheckpointError, checkpoint_file, checkpoint_step, read_checkpoint
from seqlab.data.prompting import PromptSettings
from seqlab.decoding import DecodingConfig
from seqlab.decoding.options import digest_neutral
from seqlab.hardware import QUIET_CORES, busy_warning, cpu_flags, cpu_model, gpu_host_tolerance
from seqlab.io import atomic_write_lines_gz, atomic_write_text, one_line, read_lines_gz
from seqlab.metrics.neural import NeuralSettings
from seqlab.pipeline import core as pipeline_core
from seqlab.pipeline.commands import Command, commit_archive, seqlab
from seqlab.pipeline.core import OUTPUTS, Pipeline, Stage
from seqlab.pipeline.devices import stage_device
from seqlab.pipeline.training import diverged_at, training_result, wall_time
from seqlab.provenance import capture, git_state
from seqlab.tracking.results import DIVERGED, HYPOTHESES_FILE, METRICS_FILE, OK, source_tokens_of
from seqlab.train.config import LoraConfig

# the Hydra config each command composes
CONFIG_NAMES = {"train": "train", "evaluate": "eval", "bench": "bench", "distill": "distill"}
DROPPED = ("paths", "root_dir", "data_dir", "cache_dir", "log_dir", "output_dir", "hydra", "results_dir", "logger",
           "out", "ckpt",  # where things go, not what they compute: dropped at any depth (data.cache_dir too)
           "pin_memory",  # how batches reach a GPU, not which batches
           "profile")  # the bench's profiler tables, taken after its timings
# Keys added after archived runs, before the archive's keys were frozen (app.frozen_keys), left out of a digest
# at the value that computes what those runs computed (tests/unit/test_variants.py: every earlier model decodes
# bit-identically; the processors are those of before): the pretrained families' variants, Hugging Face's token
# constraints, language pairs, fine-tuning, the toolkits' decoders (docs/reliability.md, "Compatibility"). This
# list is closed: a key added now is left out at its default by construction (`without_new_defaults`).
NEUTRAL: dict[str, dict[str, Any]] = {
    "model": {"gated_ffn": False, "norm": "layernorm", "bias": True, "scale_attention": True, "d_head": None,
              "position_offset": 0, "sinusoid_layout": "marian", "rescale_output": False, "position_init": "small",
              "architecture": "encoder_decoder", "start": "bos", "kv_heads": None, "qkv_bias": None,
              "sliding_window": None, "sliding_layers": None, "sandwich_norm": False, "attention_scalar": None,
              "attn_softcap": None, "logit_softcap": None, "qk_norm": False, "local_rope_base": None},
    "decoding": digest_neutral(DecodingConfig),  # each option's own declaration (decoding.options: in_digest=False)
    "": {"src_lang": None, "tgt_lang": None, "task_prefix": None, "prompt": PromptSettings().to_dict(),
         "metrics": ["bleu", "chrf", "rouge"], "ensemble": [],
         "ensemble_rule": "mean_prob", "levers": False, "language_models": False, "shapes": [], "finetune": False,
         "speculative": False, "drafts": [], "neural": NeuralSettings().to_dict(), "comet": False,
         "comet_python": None, "norms": False},
    "data": {"shuffle_each_epoch": False},  # the archived recipes replayed one batch order (conf/experiment)
    "train": {"init_from": None, "tokenizer_from": None, "fused_loss": False, "compile": "none", "bf16_weights": False,
              "activation_checkpointing": False,
              "lora": asdict(LoraConfig())},
}


DISTILLED = "corpus"  # a distill stage's corpus, in its folder
HF_FOLDER, IMPORTED = "hf", "imported.ckpt"  # an hf stage's export, and the checkpoint read back from it
INIT_FROM = "train.init_from"  # the override a fine-tuning reads an hf stage's imported checkpoint by
CORPUS_PATH = "data.corpus.path"  # the override a student's training reads its distilled corpus by
TOKENIZER_FROM = "train.tokenizer_from"  # ... and its teacher's tokenizer by (both `upstream` in the stage)


class PipelineError(ValueError):
    """A stage that cannot give one result on any machine; the message names the stage and the key."""


@dataclass
class Planned:
    stage: Stage
    digest: str
    archived: bool
    config: dict[str, Any] | None = None  # the resolved config the digest covers
    root: Path | None = None  # the pipeline's stage folders; None: OUTPUTS

    @property
    def folder(self) -> Path:
        """Where the stage runs: named by its digest, shared by every experiment that plans it."""
        return (self.root or OUTPUTS) / f"{self.stage.command}-{self.digest}"


def resolved_config(stage: Stage) -> dict[str, Any]:
    """The config seqlab composes for the stage, resolved, as plain data."""
    if stage.command == "compare":
        baseline = {"baseline": archived_baseline(stage)} if stage.baseline else {}
        return {"overrides": list(stage.overrides), **baseline}
    if stage.command == "hf":
        return {"overrides": list(stage.overrides)}
    plain = copy.deepcopy(_composed(stage.command, tuple(stage.overrides), str(CONF_DIR)))
    if stage.command == "bench":  # its figures hold for one kind of CPU, or of GPU
        plain["cpu"] = machine_model(stage)
    return plain


@functools.lru_cache(maxsize=1024)
def _composed(command: str, overrides: tuple[str, ...], conf_dir: str) -> dict[str, Any]:
    """Hydra's composition of one command's config with these overrides, resolved, without places or
    digest-neutral keys: once per process (about 0.2 s each; the experiments plan 375 stages, 195 of them
    distinct). The configs read no environment, so the overrides and the config folder decide it. Callers get
    a copy (`resolved_config`)."""
    config = without_neutral(_plain_composition(command, overrides, conf_dir))
    if command not in FROZEN_KEYS:
        return config
    return without_new_defaults(config, _plain_composition(command, (), conf_dir), FROZEN_KEYS[command])


@functools.lru_cache(maxsize=1024)
def _plain_composition(command: str, overrides: tuple[str, ...], conf_dir: str) -> dict[str, Any]:
    """Hydra's composition of one command's config with these overrides, resolved, without places."""
    GlobalHydra.instance().clear()
    chosen = [o for o in overrides if not o.startswith("hydra.")]
    if command in ("evaluate", "distill"):
        chosen.append("ckpt=upstream")
    with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
        cfg = compose(config_name=CONFIG_NAMES[command], overrides=chosen, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    composed = {k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
                for k in cfg if k not in DROPPED}
    GlobalHydra.instance().clear()
    return without_places(composed)


def key_paths(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every leaf of `config` by its dotted path (a list is a leaf)."""
    out: dict[str, Any] = {}
    for k, v in config.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(key_paths(v, f"{path}."))
        else:
            out[path] = v
    return out


def without_new_defaults(config: dict[str, Any], default: dict[str, Any], frozen: frozenset[str]) -> dict[str, Any]:
    """`config` without each key that archived digests never carried (not in `frozen`, the keys of the
    archive's generation, app.frozen_keys) while it holds the command's default value (`default`: its
    composition without overrides): a field added later leaves every archived digest as it was, with nothing
    to remember, and changes the digest of the stages that set it."""
    defaults = key_paths(default)

    def keep(node: dict[str, Any], prefix: str) -> dict[str, Any]:
        out = {}
        for k, v in node.items():
            path = f"{prefix}{k}"
            if isinstance(v, dict) and v:
                v = keep(v, f"{path}.")
                if not v and path not in frozen:  # a new section, all of it at its defaults
                    continue
            elif path not in frozen and path in defaults and defaults[path] == v:
                continue
            out[k] = v
        return out

    return keep(config, "")


def frozen_keys(conf_dir: str = str(CONF_DIR)) -> dict[str, frozenset[str]]:
    """Each command's config keys now (dotted paths, the dicts among them): what app.frozen_keys holds for the
    archive's generation (`write_frozen_keys`)."""
    out = {}
    for command in CONFIG_NAMES:
        paths = key_paths(_plain_composition(command, (), conf_dir))  # NEUTRAL's keys too: they existed
        dicts = {p.rsplit(".", i)[0] for p in paths for i in range(1, p.count(".") + 1)}
        out[command] = frozenset(paths) | dicts
    return out


def write_frozen_keys(path: Path | None = None) -> None:
    """Write app.frozen_keys: only with a new archive generation (every record rerun), since a key frozen
    here enters the digest of every stage."""
    path = path or Path(__file__).with_name("frozen_keys.py")
    keys = frozen_keys()
    body = ",\n".join(f"    {json.dumps(c)}: frozenset({{\n" + "".join(f"        {json.dumps(k)},\n" for k in sorted(v))
                      + "    })" for c, v in keys.items())
    atomic_write_text(path, '"""The config keys of the archive\'s generation, per command (dotted paths): archived '
                      'digests carry these;\nany other key is left out of a digest at its default value '
                      '(app.runner.without_new_defaults).\nWritten by app.runner.write_frozen_keys; never by '
                      'hand."""\n\nFROZEN_KEYS: dict[str, frozenset[str]] = {\n' + body + ",\n}\n")


def baseline_record(stage: Stage) -> Path:
    """A compare stage's baseline: the record another experiment archived (results/EXPERIMENT/STAGE.json)."""
    return pipeline_core.RESULTS / f"{stage.baseline}.json"


def archived_baseline(stage: Stage) -> str:
    """The baseline a compare stage reads, with the digest of its archived record (a rerun of it re-keys)."""
    path = baseline_record(stage)
    record = json.loads(path.read_text()) if path.is_file() else {}
    if record.get("status") != OK or "outputs" not in record.get("result", {}):
        raise PipelineError(f"stage {stage.name}: its baseline {stage.baseline} has no archived evaluation with its "
                            f"outputs at {path}; run that experiment first")
    return f"{stage.baseline}@{record['digest']}"


def gpu_name(stage: Stage, config: dict[str, Any]) -> str | None:
    """The GPU a training or decoding stage ran on (its manifest's `device`), None for the CPU."""
    if stage_device(stage.command, config) != "cuda":
        return None
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cuda"


def on_gpu(stage: Stage) -> bool:
    """Whether a bench stage times a GPU (bench.device=cuda...)."""
    return any(o.startswith("bench.device=cuda") for o in stage.overrides)


def machine_model(stage: Stage) -> str:
    """What a bench stage's figures hold for: the CPU's model, or a GPU stage's GPU ("no GPU" without one:
    such a stage cannot run here, and its digest matches no archived record). A hypervisor can report one
    model name ("AMD EPYC") for CPUs with and without AVX512, whose bf16 products differ ~100x
    (seqlab.bf16_gemm), so a CPU without AVX512 is its own kind."""
    if not on_gpu(stage):
        return cpu_model() if "avx512f" in cpu_flags() else f"{cpu_model()} (no AVX512)"
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"


def without_places(value: Any) -> Any:
    """`value` without the DROPPED keys at any depth: one digest on any checkout and machine."""
    if isinstance(value, dict):
        return {k: without_places(v) for k, v in value.items() if k not in DROPPED}
    if isinstance(value, list):
        return [without_places(v) for v in value]
    return value


def without_neutral(config: dict[str, Any]) -> dict[str, Any]:
    """`config` without the NEUTRAL keys that hold their neutral value (a section at the top level, "": the
    top level itself)."""
    out = dict(config)
    for section, keys in NEUTRAL.items():
        node = out if not section else out.get(section)
        if not isinstance(node, dict):
            continue
        kept = {k: v for k, v in node.items() if not (k in keys and v == keys[k])}
        if section:
            out[section] = kept
        else:
            out = kept
    return out


def check_fixed(stage: Stage, config: dict[str, Any]) -> None:
    """A training stops at a fixed number of updates with a pinned precision; a decoding pins its engine."""
    if stage.command == "train":
        trainer = config.get("trainer", {})
        if trainer.get("max_time") is not None or not (trainer.get("max_steps") or 0) > 0:
            raise PipelineError(f"stage {stage.name}: training must stop at trainer.max_steps (now "
                                f"{trainer.get('max_steps')}) with trainer.max_time=null (now "
                                f"{trainer.get('max_time')}), so that one digest means one result on any CPU")
        if trainer.get("precision") == "auto":
            raise PipelineError(f"stage {stage.name}: trainer.precision=auto is chosen by a probe at start-up; "
                                "pin it (bf16-mixed or 32)")
    if stage.command in ("evaluate", "distill"):
        for key in ("precision", "engine"):
            if config.get(key) in (None, "auto"):
                raise PipelineError(f"stage {stage.name}: {key}={config.get(key)} is chosen at run time; pin it")


def digest(stage: Stage, config: dict[str, Any], upstream: list[str]) -> str:
    payload = {"command": stage.command, "config": config, "upstream": upstream[0] if len(upstream) == 1 else
               upstream or None}
    if stage.checkpoint is not None:  # which of its training's checkpoints an evaluation decodes
        payload["checkpoint"] = stage.checkpoint
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def machine_kind(stage: Stage) -> str:
    """This machine's CPU (or a GPU stage's GPU) as a file-name part: a bench stage keeps one record per kind."""
    return re.sub(r"[^a-z0-9]+", "-", machine_model(stage).lower()).strip("-") or "unknown"


def record_path(pipeline: Pipeline, stage: Stage) -> Path:
    suffix = f"-{machine_kind(stage)}" if stage.command == "bench" else ""
    return pipeline.archive / f"{stage.name}{suffix}.json"


def read_record(path: Path, digest: str | None) -> dict[str, Any] | None:
    """The finished record at `path` if it is for `digest`."""
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    return record if record.get("status") in (OK, DIVERGED) and record.get("digest") == digest else None


def plan(pipeline: Pipeline) -> list[Planned]:
    """Every stage with its digest and whether the archive holds its result."""
    digests: dict[str, str] = {}
    out = []
    for stage in pipeline.stages:
        config = resolved_config(stage)
        check_fixed(stage, config)
        d = digest(stage, config, [digests[u] for u in stage.upstream()])
        digests[stage.name] = d
        out.append(Planned(stage, d, read_record(record_path(pipeline, stage), d) is not None, config,
                           pipeline.stage_root))
    return out


def result_folder(planned: Planned) -> Path:
    """An evaluation's result folder (the one holding metrics.json) under its stage folder."""
    found = sorted(planned.folder.glob(f"**/{METRICS_FILE}"))
    return found[0].parent if found else planned.folder


def present(planned: Planned) -> bool:
    """Whether this machine holds what later stages read from the stage: a finished training's checkpoint, or
    hypotheses."""
    if planned.stage.command == "train":
        return finished_training(planned)
    if planned.stage.command == "evaluate":
        return (result_folder(planned) / HYPOTHESES_FILE).is_file()
    if planned.stage.command == "distill":
        return (planned.folder / DISTILLED / "distill.json").is_file()
    if planned.stage.command == "hf":
        return (planned.folder / IMPORTED).is_file()
    return True


def command_lines(by_name: dict[str, Planned], planned: Planned, rerun: frozenset[str] = frozenset()
                  ) -> list[list[str]]:
    """The seqlab commands that run the stage in its folder, in turn: an hf stage exports its training's
    checkpoint as a Hugging Face folder, then imports that folder as a user would; every other stage is one."""
    stage, where = planned.stage, planned.folder
    if stage.command != "hf":
        return [command_line(by_name, planned, rerun)]
    assert stage.after is not None
    ckpt = checkpoint_file(by_name[stage.after].folder, stage.checkpoint or LAST)
    return [["export", "--ckpt", str(ckpt), "--out", str(where / HF_FOLDER), *stage.overrides],
            ["import", "--hf", str(where / HF_FOLDER), "--out", str(where / IMPORTED)]]


def command_line(by_name: dict[str, Planned], planned: Planned, rerun: frozenset[str] = frozenset()) -> list[str]:
    """The seqlab command that runs the stage in its folder (a training rerun by name starts over)."""
    stage, where = planned.stage, planned.folder
    if stage.command == "train":
        last = checkpoint_file(where, LAST)  # a training cut off goes on from where it stopped
        resume = [f"train.resume={last}"] if last.is_file() and stage.name not in rerun else []
        overrides = stage.overrides
        if stage.after is not None and by_name[stage.after].stage.command == "hf":  # fine-tuning an imported model
            places = {INIT_FROM: by_name[stage.after].folder / IMPORTED}
            overrides = tuple(f"{key}={places[key]}" if (key := o.split("=", 1)[0]) in places else o
                              for o in overrides)
        elif stage.after is not None:  # a student: the distillation's corpus and its teacher's tokenizer
            distill = by_name[stage.after]
            assert distill.stage.after is not None
            places = {CORPUS_PATH: distill.folder / DISTILLED,
                      TOKENIZER_FROM: checkpoint_file(by_name[distill.stage.after].folder, LAST)}
            overrides = tuple(f"{key}={places[key]}" if (key := o.split("=", 1)[0]) in places else o
                              for o in overrides)
        return ["train", *overrides, *resume, f"hydra.run.dir={where}"]
    if stage.command == "distill":  # the teacher's training set decoded; a cut run resumes at its shard
        assert stage.after is not None
        ckpt = checkpoint_file(by_name[stage.after].folder, stage.checkpoint or LAST)
        return ["distill", f"ckpt={ckpt}", *stage.overrides, f"out={where / DISTILLED}", f"hydra.run.dir={where}"]
    if stage.command == "evaluate":
        assert stage.after is not None
        trained = by_name[stage.after].folder
        ckpt = trained / IMPORTED if by_name[stage.after].stage.command == "hf" else \
            checkpoint_file(trained, stage.checkpoint) if stage.checkpoint else trained
        return ["evaluate", f"ckpt={ckpt}", *stage.overrides, f"results_dir={where}"]
    if stage.command == "compare":
        base = [str(baseline_record(stage))] if stage.baseline else []
        return ["compare", *base, *(str(result_folder(by_name[c])) for c in stage.compares), *stage.overrides,
                "--json", str(where / "compare.json")]
    if stage.command == "bench":  # after a training: its model decodes its corpus's test sentences
        ckpt = [f"ckpt={checkpoint_file(by_name[stage.after].folder, LAST)}"] if stage.after else []
        return ["bench", *ckpt, *stage.overrides, f"out={where / 'bench.json'}"]
    return [stage.command, *stage.overrides]


def finished_training(planned: Planned) -> bool:
    """Whether the training's folder holds its last checkpoint at the end: after trainer.max_steps updates, or
    where it diverged. One that a stopped sitting left (each validation saves one) is not: the stage trains on
    from it, and nothing decodes it meanwhile."""
    last = checkpoint_file(planned.folder, LAST)
    if not last.is_file():
        return False
    if diverged_at(planned.folder) is not None or planned.config is None:
        return True
    try:
        return checkpoint_step(last) >= planned.config["trainer"]["max_steps"]
    except CheckpointError:  # cut off while written: the stage runs, and its resume names the file
        return False


def needed_stages(planned: list[Planned]) -> set[str]:
    """The stages to run: those the archive lacks, and upstream of those the outputs they read on this
    machine (an evaluation needs its checkpoint, a comparison its evaluations' hypotheses)."""
    by_name = {p.stage.name: p for p in planned}
    needed = {p.stage.name for p in planned if not p.archived}
    for p in reversed(planned):  # downstream first, so that a needed evaluation pulls in its training
        if p.stage.name in needed:
            needed |= {u for u in p.stage.upstream() if not present(by_name[u])}
    return needed


def upstream_closure(by_name: dict[str, Planned], names: frozenset[str]) -> set[str]:
    """`names` and every stage they read from, transitively."""
    found, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo.extend(by_name[name].stage.upstream())
    return found


def execute(pipeline: Pipeline, command: Command = seqlab, dry_run: bool = False, commit: bool = False,
            rerun: frozenset[str] = frozenset(), only: frozenset[str] = frozenset(), parallel: int = 1) -> list[str]:
    """Run the stages the archive lacks (and those whose outputs they read); returns what failed. `commit`:
    git-commit the archive after each record lands (only the archive's folder), so a queue cut off keeps
    every finished stage. `rerun`: stages run again although archived (a digest covers the config, not the
    code: a changed measurement is rerun by name). `only`: these stages and what they read, no others (a
    machine lent for minutes runs the one measurement it is lent for); a name may be a pattern
    (`decoder_only-seed?.*`). `parallel`: the trainings that read no other stage run first, this many at a
    time (processes sharing one GPU), each archived as it lands; the rest follows in order."""
    rerun, only = matching(pipeline, "--rerun", rerun), matching(pipeline, "--only", only)
    planned = [replace(p, archived=False) if p.stage.name in rerun else p for p in plan(pipeline)]
    by_name = {p.stage.name: p for p in planned}
    needed = needed_stages(planned)
    asked = upstream_closure(by_name, only) if only else {p.stage.name for p in planned}
    needed &= asked
    failed: list[str] = []
    ran: set[str] = set()
    if parallel > 1 and not dry_run:
        first = [p for p in planned if p.stage.command == "train" and p.stage.after is None
                 and p.stage.name in needed and ran_here_before(p, rerun) is None]
        lock = threading.Lock()

        def one(p: Planned) -> None:
            if not run_stage(pipeline, by_name, p, command, commit, rerun, lock):
                with lock:
                    failed.append(p.stage.name)

        with ThreadPoolExecutor(max_workers=parallel) as pool:
            list(pool.map(one, first))
        ran = {p.stage.name for p in first}
    for p in planned:
        if p.stage.name in ran:
            continue
        if p.stage.name not in asked:
            print(f"== {p.stage.name}: left as it is (--only)", file=sys.stderr)
            continue
        if p.stage.name not in needed:
            print(f"== {p.stage.name}: archived ({p.digest})", file=sys.stderr)
            if not dry_run and describe_local_training(pipeline, p, planned, needed) and commit:
                commit_archive(pipeline.archive, f"{pipeline.name}: {p.stage.name} (the training decoded here)")
            continue
        if any(u in failed for u in p.stage.upstream()):
            failed.append(p.stage.name)
            print(f"== {p.stage.name}: not run, {', '.join(u for u in p.stage.upstream() if u in failed)} failed",
                  file=sys.stderr)
            continue
        done = ran_here_before(p, rerun)
        if done is not None:  # run on this machine for another experiment: the same result
            print(f"== {p.stage.name}: ran here before ({p.folder}), archived", file=sys.stderr)
            if not dry_run:
                adopt_record(pipeline, p, done, commit)
            continue
        if dry_run:
            line = " && ".join("seqlab " + " ".join(args) for args in command_lines(by_name, p, rerun))
            print(f"== {p.stage.name}: would run: {line}", file=sys.stderr)
            continue
        if not run_stage(pipeline, by_name, p, command, commit, rerun):
            failed.append(p.stage.name)
    return failed


def ran_here_before(p: Planned, rerun: frozenset[str]) -> dict[str, Any] | None:
    """The record this machine left for the stage (run for another experiment with the same digest), unless the
    stage is to run again."""
    return read_record(p.folder / "record.json", p.digest) if present(p) and p.stage.name not in rerun else None


def matching(pipeline: Pipeline, flag: str, names: frozenset[str]) -> frozenset[str]:
    """The stage names `names` give, each a name or a pattern (fnmatch); one that names no stage is refused."""
    stages = [s.name for s in pipeline.stages]
    found: set[str] = set()
    for name in names:
        hits = fnmatch.filter(stages, name)
        if not hits:
            raise PipelineError(f"{flag} {name!r}: no such stage of {pipeline.name}; its stages: {stages}")
        found |= set(hits)
    return frozenset(found)


def run_stage(pipeline: Pipeline, by_name: dict[str, Planned], p: Planned, command: Command, commit: bool,
              rerun: frozenset[str], lock: threading.Lock | None = None) -> bool:
    """Run one stage's commands in its folder and archive its record; whether it succeeded (`lock`: held while
    archiving and committing, when stages run side by side)."""
    commands = command_lines(by_name, p, rerun)
    line = " && ".join("seqlab " + " ".join(args) for args in commands)
    print(f"== {p.stage.name}: running: {line}", file=sys.stderr)
    p.folder.mkdir(parents=True, exist_ok=True)
    start, code = time.perf_counter(), git_state()  # the code that runs (the checkout may move on meanwhile)
    if not all(command(*args) for args in commands) and not (p.stage.diverges and diverged_at(p.folder) is not None):
        return False
    refusal = unreliable(p)
    if refusal is not None:
        print(f"== {p.stage.name}: not archived: {refusal}", file=sys.stderr)
        return False
    with lock or contextlib.nullcontext():
        archive_stage(pipeline, p, line, time.perf_counter() - start, code)
        if commit:
            commit_archive(pipeline.archive, f"{pipeline.name}: {p.stage.name}")
    return True


def adopt_record(pipeline: Pipeline, planned: Planned, done: dict[str, Any], commit: bool) -> None:
    """Archive a stage run on this machine for another experiment (the same digest, so the same result):
    its record under this archive's name for the stage, with its outputs where it decoded."""
    done = {**done, "stage": planned.stage.name}
    if planned.stage.command == "evaluate":
        done["result"] = {**done["result"], "outputs": archive_outputs(pipeline, planned)}
    atomic_write_text(record_path(pipeline, planned.stage), json.dumps(done, indent=1) + "\n")
    if commit:
        commit_archive(pipeline.archive, f"{pipeline.name}: {planned.stage.name}")


def describe_local_training(pipeline: Pipeline, planned: Planned, stages: list[Planned], needed: set[str]) -> bool:
    """Keep an archived training's record true to what its decodings decode: where a stage that reads it runs
    here, on this machine's checkpoint of the same digest, and this machine's training of it left a record
    (record.json) other than the archived one (another machine's run of the same config: a model that differs
    by its kernels' rounding), the archive takes this machine's record. Whether it did."""
    if planned.stage.command != "train" or not present(planned) or not any(
            planned.stage.name in q.stage.upstream() and q.stage.name in needed for q in stages):
        return False
    here, archived = read_record(planned.folder / "record.json", planned.digest), \
        read_record(record_path(pipeline, planned.stage), planned.digest)
    if here is None or archived is None or here["manifest"] == archived["manifest"]:
        return False
    atomic_write_text(record_path(pipeline, planned.stage),
                      json.dumps({**here, "stage": planned.stage.name}, indent=1) + "\n")
    print(f"== {planned.stage.name}: the archive now describes the training its decodings read here "
          f"({here['manifest'].get('cpu')}, {here['manifest'].get('date')})", file=sys.stderr)
    return True


def unreliable(planned: Planned) -> str | None:
    """Why a stage that ran may not be archived: a bench on a machine that other work kept busy."""
    if planned.stage.command != "bench":
        return None
    tolerance = gpu_host_tolerance() if on_gpu(planned.stage) else QUIET_CORES
    why = busy_warning(json.loads((planned.folder / "bench.json").read_text()).get("others_busy_cores"), tolerance)
    return f"{why} during the bench; rerun it when no training or evaluation runs beside it" if why else None


def archive_outputs(pipeline: Pipeline, planned: Planned) -> dict[str, Any]:
    """An evaluation's outputs beside its record: its first hypothesis per test sentence
    (`<stage>.hyps.txt.gz`), the words each had to contain where it was constrained (`<stage>.constraints.txt.gz`)
    and the references they score against, one file per reference stream, shared by
    the archive's evaluations of that test set (`test.references.txt.gz`, `test.references2.txt.gz`, ...; a
    stage's own where it decoded another): what a reader recomputes any reported score from. Returns the
    file names the record keeps."""
    rows = [json.loads(line) for line in (result_folder(planned) / HYPOTHESES_FILE).read_text().splitlines()
            if line.strip()]
    name = planned.stage.name
    hypotheses = atomic_write_lines_gz(pipeline.archive / f"{name}.hyps.txt.gz",
                                       [one_line(r["hypothesis"]) for r in rows]).name
    outputs: dict[str, Any] = {"hypotheses": hypotheses}
    if any(r.get("constraints") for r in rows):  # the words each output had to contain, TAB-separated
        outputs["constraints"] = atomic_write_lines_gz(pipeline.archive / f"{name}.constraints.txt.gz",
                                                       ["\t".join(r.get("constraints") or []) for r in rows]).name
    references = [test_side(pipeline.archive, name, f"references{'' if k == 0 else k + 1}", list(stream))
                  for k, stream in enumerate(zip(*(r.get("references") or [r["reference"]] for r in rows),
                                                 strict=True))]
    lengths = source_tokens_of(rows)
    if lengths is not None:  # each source's subword tokens as decoded: the per-length tables' buckets
        outputs["source_tokens"] = test_side(pipeline.archive, name, "source_tokens", [str(n) for n in lengths])
    return {**outputs, "references": references}


def archive_distilled(pipeline: Pipeline, planned: Planned) -> str:
    """A distillation's outputs beside its record: the teacher's output for each training example, in the
    corpus's order (`<stage>.train_targets.txt.gz`): with the corpus, the student's training set."""
    rows = [json.loads(line) for line in read_lines_gz(planned.folder / DISTILLED / "train.jsonl.gz")]
    return atomic_write_lines_gz(pipeline.archive / f"{planned.stage.name}.train_targets.txt.gz",
                                 [one_line(r["target"]) for r in rows]).name


def hf_result(where: Path) -> dict[str, Any]:
    """An hf stage's record: the folder's family and files (name -> bytes), and what the import read back."""
    folder = where / HF_FOLDER
    config = json.loads((folder / "config.json").read_text())
    imported = read_checkpoint(where / IMPORTED)["seqlab"]
    return {"family": config.get("model_type"), "architectures": config.get("architectures"),
            "files": {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()},
            "imported": {"family": imported.get("family"), "start": imported["model_config"].get("start"),
                         "chat_template": bool((imported["tokenizer"].get("chat") or {}).get("template"))}}


def test_side(archive: Path, stage: str, what: str, lines: list[str]) -> str:
    """One line per test example, shared by the archive's evaluations of one test set (`test.<what>.txt.gz`),
    or the stage's own (`<stage>.<what>.txt.gz`) where it decoded another; its file name."""
    shared = archive / f"test.{what}.txt.gz"
    if not shared.exists():
        atomic_write_lines_gz(shared, lines)
    elif read_lines_gz(shared) != lines:
        shared = atomic_write_lines_gz(archive / f"{stage}.{what}.txt.gz", lines)
    return shared.name


def archive_stage(pipeline: Pipeline, planned: Planned, line: str, wall_s: float,
                  code: tuple[str, bool] | None = None) -> Path:
    """The stage's record: its digest, its result (metrics, a training's curve, a comparison's tests, a
    bench's figures) and manifest, in the archive and in the stage's folder. `code`: the checkout's commit
    and cleanliness when the stage started (default: now)."""
    stage, where = planned.stage, planned.folder
    assert planned.config is not None
    result: dict[str, Any] = {}
    precision, engine, updates, status = "", None, None, OK
    if stage.command == "train":
        status, result = training_result(where)
        updates, wall_s = result["steps"], wall_time(where, wall_s)
        precision = str(planned.config["trainer"]["precision"])
    elif stage.command == "evaluate":
        payload = json.loads((result_folder(planned) / METRICS_FILE).read_text())
        result = {"metrics": payload["metrics"], "label": payload.get("label"), "decoding": payload.get("decoding"),
                  "outputs": archive_outputs(pipeline, planned)}
        precision, engine = str(payload["settings"]["precision"]), str(payload.get("engine"))
        updates = payload.get("checkpoint", {}).get("step")
    elif stage.command == "compare":
        baseline = [stage.baseline] if stage.baseline else []  # another experiment's, named EXPERIMENT/STAGE
        result = {**json.loads((where / "compare.json").read_text()), "stages": [*baseline, *stage.compares]}
    elif stage.command == "bench":
        result = json.loads((where / "bench.json").read_text())
    elif stage.command == "hf":
        result = hf_result(where)
    elif stage.command == "distill":
        result = {**json.loads((where / DISTILLED / "distill.json").read_text()),
                  "outputs": {"train_targets": archive_distilled(pipeline, planned)}}
        precision, engine = str(planned.config.get("precision")), str(planned.config.get("engine"))
    commit, clean = code if code is not None else (None, None)
    manifest = capture(line, precision, engine, wall_s, updates, commit=commit, clean=clean,
                       device=gpu_name(stage, planned.config)).to_dict()
    if manifest["device"] is None:
        del manifest["device"]  # a CPU stage's record as every CPU record is (its CPU named above)
    record = {"stage": stage.name, "status": status, "digest": planned.digest, "result": result, "manifest": manifest}
    text = json.dumps(record, indent=1, default=str) + "\n"
    atomic_write_text(where / "record.json", text)
    return atomic_write_text(record_path(pipeline, stage), text)
