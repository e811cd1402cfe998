"""An experiment's stages on one GPU (`python -m pipelines NAME --device cuda`, `make gpu-study`).

The same recipe: each training on the GPU (`trainer.accelerator=gpu`, one device, the precision its recipe pins,
bf16-mixed for the study's), each decoding there (`device=cuda`, the precision and engine its stage pins). The
device is part of each stage's config, so a GPU stage has its own digest, and the copy has its own archive,
`results/<experiment>-gpu/`: a question compares runs of one kind of device, its baseline trained again there
beside its variants, never a CPU baseline against GPU variants. Every record names the GPU that ran it (the
manifest's `device`). Bench stages are left out: a GPU's speed is bench_gpu's measurement.
"""

from __future__ import annotations

from dataclasses import replace

from seqlab.pipeline.core import Pipeline

GPU_SUFFIX = "-gpu"  # the GPU copy's archive: results/<experiment>-gpu/
ON_GPU = {"train": ("trainer.accelerator=gpu", "trainer.devices=1"), "evaluate": ("device=cuda",),
          "distill": ("device=cuda",)}
DEVICES = ("cpu", "cuda")


def on_device(pipeline: Pipeline, device: str) -> Pipeline:
    """`pipeline` as it runs on `device`: itself on the CPU; on a GPU, its copy (see the module)."""
    if device not in DEVICES:
        raise ValueError(f"--device {device}: one of {', '.join(DEVICES)}")
    if device == "cpu":
        return pipeline
    kept = [s for s in pipeline.stages if s.command != "bench"]
    stages = tuple(replace(s, overrides=(*s.overrides, *ON_GPU.get(s.command, ()))) for s in kept)
    return replace(pipeline, name=pipeline.name + GPU_SUFFIX, stages=stages, tables=(), folder=None)


def stage_device(command: str, config: dict) -> str:
    """Where a stage's config runs it: `cuda` for a training on a GPU accelerator or a decoding on cuda."""
    if command == "train":
        return "cuda" if str((config.get("trainer") or {}).get("accelerator")) in ("gpu", "cuda") else "cpu"
    if command in ("evaluate", "distill"):
        return "cuda" if str(config.get("device", "")).startswith("cuda") else "cpu"
    return "cpu"
