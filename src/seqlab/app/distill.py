"""Sequence-level knowledge distillation (Kim & Rush 2016): `seqlab distill ckpt=TEACHER out=DIR [decoding=beam]`.

The teacher decodes its corpus's training split (beam 5 by default, conf/distill.yaml) and DIR becomes a
corpus a student trains on as on any other (`data.corpus.path=DIR`, conf/data/distilled.yaml):
`train.jsonl.gz` holds each training source with the teacher's best output as its target; `validation.jsonl.gz`
and `test.jsonl.gz` the corpus's own examples with their references, so the student is validated and tested
against the real references. Each line is `{"id", "source", "target"}`.

Resumable: the sources are decoded `shard_size` at a time, each shard written atomically under DIR/shards/, and
a rerun decodes only the shards that are missing; the corpus files and `distill.json` (the teacher, its step,
the decoding, counts and seconds) are written once every shard exists. A finished folder is not decoded again
(force=true does). A folder belongs to one teacher (its file, size and time) and one decoding, written first in
`DIR/owner.json`: another teacher or decoding is refused naming both, finished or cut (force=true starts the
folder over for the new one), so a corpus never mixes two teachers' outputs.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from seqlab.app.cli import reraise
from seqlab.app.infer import DistillSettings, InferenceRequest, Loaded, load, settings_of
from seqlab.app.store import CONF_DIR
from seqlab.checkpoint import resolve
from seqlab.config import ConfigError
from seqlab.data import DataConfig, Example
from seqlab.data.corpora import load_split
from seqlab.inference.evaluation import decode_texts
from seqlab.io import atomic_write_lines_gz, atomic_write_text, read_lines_gz
from seqlab.memory import keep_freed_memory
from seqlab.progress import Progress

log = logging.getLogger("seqlab.distill")
RECORD = "distill.json"
OWNER = "owner.json"  # the teacher and decoding the folder's shards come from


def owner_of(request: InferenceRequest) -> dict[str, Any]:
    """What a folder's outputs depend on: the teacher's file (path, size, modification time) and the decoding."""
    path = resolve(request.checkpoint)
    stat = path.stat()
    decoding = {"from_checkpoint": dict(request.decoding_overrides)} if request.from_checkpoint \
        else request.decoding.to_dict()
    return {"teacher": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "decoding": decoding,
            "precision": request.precision, "engine": request.engine}


def check_owner(out: Path, owner: dict[str, Any], force: bool) -> None:
    """Refuse a folder that holds another teacher's or decoding's outputs (force=true: start it over, its old
    shards and record removed); `claim` then makes it this one's."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"distill.out={out} is a file; name a folder for the distilled corpus")
    path = out / OWNER
    if path.is_file():
        held = json.loads(path.read_text())
        if held != owner and not force:
            what = "teacher" if (held.get("teacher"), held.get("size"), held.get("mtime_ns")) != \
                (owner["teacher"], owner["size"], owner["mtime_ns"]) else "decoding"
            raise ConfigError(f"distill.out={out} holds the outputs of another {what} ({held.get('teacher')}, "
                              f"{held.get('decoding')}) than this one ({owner['teacher']}, {owner['decoding']}); "
                              "name another folder, or force=true to start this one over")
        if held != owner:
            shutil.rmtree(out / "shards", ignore_errors=True)
            (out / RECORD).unlink(missing_ok=True)


def claim(out: Path, owner: dict[str, Any]) -> None:
    """`out` is this teacher's and decoding's folder from now on."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / OWNER, json.dumps(owner, indent=2, default=str))


def line(example_id: str, source: str, target: str) -> str:
    return json.dumps({"id": example_id, "source": source, "target": target}, ensure_ascii=False)


def distil_shard(loaded: Loaded, examples: list[Example], settings: DistillSettings, path: Path) -> int:
    """Decode one shard's sources and write its lines atomically; returns the empty outputs."""
    progress = Progress(len(examples), f"distilling {path.stem}")
    try:
        decoded = decode_texts(loaded.model, loaded.tokenizer, [e.source for e in examples], loaded.decoding,
                               settings.max_tokens, progress, settings.precision, loaded.engine,
                               names=[f"training example {e.id}" for e in examples])
    finally:
        progress.close()
    outputs = [loaded.tokenizer.decode_target(hyps[0][0]) for hyps in decoded.hypotheses]
    atomic_write_lines_gz(path, [line(e.id, e.source, t) for e, t in zip(examples, outputs, strict=True)])
    return sum(not t.strip() for t in outputs)


def run_distill(cfg: DictConfig) -> dict[str, Any]:
    """Distil, or report a folder that already holds this distillation."""
    request = InferenceRequest.from_cfg(cfg, "distill", DistillSettings)  # bad values fail before loading
    settings = settings_of(cfg, DistillSettings, "distill")
    out = Path(settings.out)
    owner = owner_of(request)
    check_owner(out, owner, settings.force)  # another teacher's folder is refused before anything loads
    if (out / RECORD).is_file() and not settings.force:
        log.info("already distilled: %s (force=true to redo)", out / RECORD)
        return {"status": "skipped", **json.loads((out / RECORD).read_text())}
    keep_freed_memory()
    loaded = load(request, cfg.device, Path(cfg.paths.cache_dir))
    if not loaded.info.data_config:
        raise ConfigError(f"{loaded.info.path}: the checkpoint records no corpus (an imported model); distil a "
                          "checkpoint seqlab trained on the corpus")
    claim(out, owner)
    corpus = DataConfig.from_dict(loaded.info.data_config).corpus
    examples = load_split(corpus, "train")[: settings.limit]
    shards = [examples[i: i + settings.shard_size] for i in range(0, len(examples), settings.shard_size)]
    start, empty, decoded = time.perf_counter(), 0, 0
    for k, shard in enumerate(shards):  # the engine decodes in the request's precision (decoding.engine)
        path = out / "shards" / f"train-{k:05d}.jsonl.gz"
        if path.is_file() and not settings.force:
            continue  # a cut run resumes here
        empty += distil_shard(loaded, shard, settings, path)
        decoded += len(shard)
    train = [row for k in range(len(shards)) for row in read_lines_gz(out / "shards" / f"train-{k:05d}.jsonl.gz")]
    atomic_write_lines_gz(out / "train.jsonl.gz", train)
    for split in ("validation", "test"):
        atomic_write_lines_gz(out / f"{split}.jsonl.gz",
                              [line(e.id, e.source, e.target) for e in load_split(corpus, split)])
    record = {"teacher": str(loaded.info.path), "step": loaded.info.step, "corpus": corpus.name,
              "task": corpus.task, "decoding": loaded.decoding.to_dict(), "label": request.label,
              "examples": len(train), "decoded_now": decoded, "empty_outputs_now": empty,
              "seconds_now": time.perf_counter() - start}
    atomic_write_text(out / RECORD, json.dumps(record, indent=2, default=str))
    log.info("distilled %d training examples of %s into %s", len(train), corpus.name, out)
    return {"status": "ok", **record}


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="distill")
def main(cfg: DictConfig) -> None:
    try:
        run_distill(cfg)
    except Exception as err:
        reraise("distill", err)


def run() -> int:
    """`seqlab distill`."""
    main()
    return 0
