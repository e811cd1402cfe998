"""Self-describing checkpoints and the one way back to a model.

A checkpoint is a Lightning checkpoint with a `seqlab` entry: ModelConfig,
tokenizer model bytes, data config, step and git revision. It is read with
`torch.load(weights_only=True)`, which unpickles tensors and plain containers
only: loading a checkpoint never runs code from the file.
"""

from __future__ import annotations

import pickle
import subprocess
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from seqlab.data.tokenizer import Tokenizer
from seqlab.model import ModelConfig, Seq2SeqTransformer

CKPT_SUFFIX = ".ckpt"
BEST, LAST = "best", "last"


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, truncated, corrupt or not seqlab's; the message names the file."""


@dataclass(frozen=True)
class CheckpointInfo:
    """What a checkpoint says about itself, besides the weights."""

    path: Path
    model_config: ModelConfig
    step: int
    data_config: dict[str, Any] = field(default_factory=dict)
    run_config: dict[str, Any] = field(default_factory=dict)
    git_revision: str | None = None


def git_revision() -> str | None:
    """The code's git commit (with '-dirty' when the tree has changes), or None outside git."""
    root = Path(__file__).resolve().parents[2]
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def resolve(path: Path | str) -> Path:
    """A checkpoint file, or a training run's directory (its best, else last, checkpoint)."""
    path = Path(path).expanduser()
    if path.is_dir():
        for name in (BEST, LAST):
            for candidate in (path / "checkpoints" / f"{name}{CKPT_SUFFIX}", path / f"{name}{CKPT_SUFFIX}"):
                if candidate.is_file():
                    return candidate
        raise CheckpointError(f"{path}: no checkpoints/{BEST}{CKPT_SUFFIX} or {LAST}{CKPT_SUFFIX} in this run "
                              "directory; pass a .ckpt file or a finished training run")
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found; pass a .ckpt file or a training run directory")
    return path


def read_checkpoint(path: Path | str) -> dict[str, Any]:
    """The raw checkpoint dict, loaded safely; clear errors for truncated or foreign files."""
    path = resolve(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError, ValueError) as err:
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{path}: cannot be read as a checkpoint ({first}); the file is truncated, "
                              "corrupt or holds objects other than tensors; re-copy it or retrain") from None
    if not isinstance(state, dict) or "seqlab" not in state or "state_dict" not in state:
        raise CheckpointError(f"{path}: not a seqlab checkpoint (no 'seqlab' description); "
                              "use a checkpoint written by pipelines/train.py")
    return state


def load_for_inference(path: Path | str, device: str | torch.device = "cpu"
                       ) -> tuple[Seq2SeqTransformer, Tokenizer, CheckpointInfo]:
    """Rebuild the model (eval mode) and tokenizer from the checkpoint file alone."""
    path = resolve(path)
    state = read_checkpoint(path)
    meta = state["seqlab"]
    cfg = ModelConfig.from_dict(meta["model_config"])
    model = Seq2SeqTransformer(cfg)
    weights = {k.removeprefix("model."): v for k, v in state["state_dict"].items() if k.startswith("model.")}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    tied = {"output.weight", "tgt_embed.tokens.weight"}
    if unexpected or set(missing) - tied:
        raise CheckpointError(f"{path}: weights do not match its ModelConfig (missing {missing[:5]}, "
                              f"unexpected {unexpected[:5]})")
    tokenizer = Tokenizer.from_dict({k: bytes.fromhex(v) if v else None for k, v in meta["tokenizer"].items()})
    info = CheckpointInfo(path=path, model_config=cfg, step=int(meta.get("step", 0)),
                          data_config=meta.get("data_config", {}), run_config=meta.get("run_config", {}),
                          git_revision=meta.get("git_revision"))
    return model.to(device).eval(), tokenizer, info


def describe(tokenizer: Tokenizer, data_config: dict[str, Any], run_config: dict[str, Any]) -> dict[str, Any]:
    """The `seqlab` entry of a checkpoint, besides what the module adds (config, step)."""
    return {
        "tokenizer": {k: v.hex() if v else None for k, v in tokenizer.to_dict().items()},
        "data_config": data_config,
        "run_config": run_config,
        "git_revision": git_revision(),
    }


def atomic_checkpoint_io() -> Any:
    """Lightning CheckpointIO that writes each checkpoint to a temporary file, then renames it."""
    from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

    from seqlab.io import atomic_write

    class AtomicCheckpointIO(TorchCheckpointIO):
        def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
            atomic_write(path, lambda f: torch.save(checkpoint, f))

    return AtomicCheckpointIO()
