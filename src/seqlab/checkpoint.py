"""Self-describing checkpoints and the one way back to a model.

A checkpoint is a Lightning checkpoint with a `seqlab` entry: ModelConfig,
tokenizer model bytes, data config, step and git revision. It is read with
`torch.load(weights_only=True)`, which unpickles tensors and plain containers
only: loading a checkpoint never runs code from the file.
"""

from __future__ import annotations

import pickle
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from seqlab.config import ConfigError
from seqlab.data.mapped import AnyTokenizer
from seqlab.data.mapped import from_checkpoint as tokenizer_from_checkpoint
from seqlab.data.tokenizer import Tokenizer
from seqlab.io import atomic_write
from seqlab.model import Model, ModelConfig, build_model
from seqlab.model.adapters import has_adapters, merge_adapters
from seqlab.provenance import git_state

CKPT_SUFFIX = ".ckpt"
BEST, LAST = "best", "last"
CHECKPOINT_DIR = "checkpoints"  # a training run folder keeps checkpoints/best.ckpt and checkpoints/last.ckpt


def checkpoint_file(run_dir: Path | str, which: str = LAST) -> Path:
    """Where a run folder keeps its `best` or `last` checkpoint."""
    return Path(run_dir) / CHECKPOINT_DIR / f"{which}{CKPT_SUFFIX}"


def run_dir_of(checkpoint: Path | str) -> Path:
    """The training run folder a checkpoint file belongs to (its own folder for a loose file)."""
    path = Path(checkpoint)
    return path.parent.parent if path.parent.name == CHECKPOINT_DIR else path.parent


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
    tracking: dict[str, Any] = field(default_factory=dict)  # the training's W&B group and run id, if any
    decoding: dict[str, Any] = field(default_factory=dict)  # decoding defaults (an imported model's generation config)
    prompt: dict[str, Any] = field(default_factory=dict)  # how a fine-tuned causal LM was asked (data.prompting)


def git_revision() -> str | None:
    """The code's git commit (with '-dirty' when the tree has changes), or None outside git."""
    rev, clean = git_state()
    return None if rev is None else rev + ("" if clean else "-dirty")


def resolve(path: Path | str) -> Path:
    """A checkpoint file, or a training run's directory (its best, else last, checkpoint)."""
    path = Path(path).expanduser()
    if path.is_dir():
        for name in (BEST, LAST):
            for candidate in (checkpoint_file(path, name), path / f"{name}{CKPT_SUFFIX}"):
                if candidate.is_file():
                    return candidate
        raise CheckpointError(f"{path}: no {CHECKPOINT_DIR}/{BEST}{CKPT_SUFFIX} or {LAST}{CKPT_SUFFIX} in this run "
                              "directory; pass a .ckpt file or a finished training run")
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found; pass a .ckpt file or a training run directory")
    return path


def verify_archive(path: Path) -> None:
    """Check every record of the checkpoint's zip archive against its CRC-32.

    `torch.load` does not: a flipped byte in tensor data or in the pickled metadata
    (a variant name, the tokenizer) loads without error and changes the model. The
    check reads the whole file once (about 0.05 s for 30 MB).
    """
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except Exception as err:  # noqa: BLE001  zipfile raises many kinds on damaged input
        raise CheckpointError(f"{path}: cannot be read as a checkpoint archive ({type(err).__name__}: {err}); the "
                              "file is truncated or corrupt; re-copy it or use another checkpoint") from None
    if bad is not None:
        raise CheckpointError(f"{path}: corrupt: record '{bad}' fails its CRC check (the file changed after it "
                              "was written); re-copy it or use another checkpoint")


def read_checkpoint(path: Path | str) -> dict[str, Any]:
    """The raw checkpoint dict, loaded safely after an integrity check; clear errors for bad files."""
    path = resolve(path)
    verify_archive(path)
    return _load(path, mmap=False)


def checkpoint_step(path: Path) -> int:
    """The updates a checkpoint was saved after, read without its tensors (memory-mapped, not checked: a
    question a plan asks of every training folder, not a load)."""
    return int(_load(path, mmap=True).get("global_step", 0))


def _load(path: Path, mmap: bool) -> dict[str, Any]:
    """torch.load of a seqlab checkpoint, bad files named."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except (RuntimeError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError, ValueError, IndexError,
            KeyError, TypeError, AttributeError) as err:
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{path}: cannot be read as a checkpoint ({first}); the file is truncated, "
                              "corrupt or holds objects other than tensors; re-copy it or retrain") from None
    if not isinstance(state, dict) or "seqlab" not in state or "state_dict" not in state:
        raise CheckpointError(f"{path}: not a seqlab checkpoint (no 'seqlab' description); "
                              "use a checkpoint written by seqlab train")
    return state


def load_for_inference(path: Path | str, device: str | torch.device = "cpu"
                       ) -> tuple[Model, AnyTokenizer, CheckpointInfo]:
    """Rebuild the model (eval mode) and tokenizer from the checkpoint file alone."""
    path = resolve(path)
    state = read_checkpoint(path)
    meta = state["seqlab"]
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: its 'seqlab' description is not a mapping; the file is damaged")
    for key in ("model_config", "tokenizer", "data_config"):
        if not isinstance(meta.get(key), dict):
            raise CheckpointError(f"{path}: the checkpoint's description has no valid '{key}'; it was not "
                                  "written by seqlab train or is damaged; use another checkpoint")
    try:
        cfg = ModelConfig.from_dict(meta["model_config"])
    except (ConfigError, TypeError, ValueError) as err:
        raise CheckpointError(f"{path}: invalid model_config in the checkpoint: {err}") from None
    model = build_model(cfg)
    weights = model_weights(state, path)
    try:
        missing, unexpected = model.load_state_dict(weights, strict=False)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[-1].strip()[:200]
        raise CheckpointError(f"{path}: weights do not fit its model_config ({first})") from None
    tied = {"output.weight", "tgt_embed.tokens.weight"}
    if unexpected or set(missing) - tied:
        raise CheckpointError(f"{path}: weights do not match its ModelConfig (missing {missing[:5]}, "
                              f"unexpected {unexpected[:5]})")
    try:
        tokenizer = tokenizer_from_checkpoint(meta["tokenizer"])
    except (KeyError, ValueError, TypeError, RuntimeError, ConfigError) as err:
        raise CheckpointError(f"{path}: the tokenizer stored in the checkpoint cannot be loaded "
                              f"({type(err).__name__}: {str(err)[:200]})") from None
    # more embedding rows than pieces is how some pretrained models ship (T5: 32,128 rows for 32,100 pieces)
    if tokenizer.src_vocab_size > cfg.src_vocab_size or tokenizer.tgt_vocab_size > cfg.target_vocab_size:
        raise CheckpointError(f"{path}: the stored tokenizer has vocabulary sizes "
                              f"{(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)} but the model only "
                              f"{(cfg.src_vocab_size, cfg.target_vocab_size)} rows; the checkpoint is inconsistent")
    model = start_from(model, tokenizer)
    info = CheckpointInfo(path=path, model_config=model.cfg, step=int(meta.get("step", 0)),
                          data_config=meta.get("data_config", {}), run_config=meta.get("run_config", {}),
                          git_revision=meta.get("git_revision"), tracking=meta.get("tracking") or {},
                          decoding=meta.get("decoding") or {}, prompt=meta.get("prompt") or {})
    return model.to(device).eval(), tokenizer, info


def model_weights(state: dict[str, Any], path: Path | str) -> dict[str, torch.Tensor]:
    """A checkpoint's model weights under the model's own names (its `model.` prefix dropped), with any LoRA
    adapters (train.lora) merged into the weights they adapt: what `build_model`'s model loads, and what a run
    trained with adapters is decoded, scored, averaged and exported as."""
    weights = {k.removeprefix("model."): v for k, v in state["state_dict"].items() if k.startswith("model.")}
    if not has_adapters(weights):
        return weights
    lora = state["seqlab"].get("lora")
    if not isinstance(lora, dict):
        raise CheckpointError(f"{path}: holds LoRA adapters but not their settings (r, alpha); the file is "
                              "damaged; use another checkpoint")
    return merge_adapters(weights, lora)


def start_from(model: Any, tokenizer: AnyTokenizer | None) -> Any:
    """The model (or ensemble) with the tokenizer's decoder start as its own: where a family's target language
    code starts the decoder (mBART-cc25: data.layout), the code of the language chosen, for decoding and
    teacher forcing alike; other models are returned as they are."""
    start = tokenizer.bos_id if tokenizer is not None else model.cfg.bos_id
    if start != model.cfg.bos_id:
        model.cfg = replace(model.cfg, bos_id=start)
    return model


def remove_stale_temporaries(folder: Path) -> list[Path]:
    """Delete `.NAME.ckpt.*.tmp` files that a killed checkpoint write left in `folder`.

    Called at the start of a run that holds the folder's lock, when no write can be in flight.
    """
    removed = []
    for tmp in folder.glob(f".*{CKPT_SUFFIX}.*.tmp"):
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


def checkpoint_meta(tokenizer: Tokenizer, data_config: dict[str, Any], run_config: dict[str, Any],
             tracking: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `seqlab` entry of a checkpoint, besides what the module adds (config, step).

    `tracking` ({"group": ..., "run_id": ...}) lets an evaluation join the training's W&B group.
    """
    return {
        "tokenizer": tokenizer.to_checkpoint(),
        "data_config": data_config,
        "run_config": run_config,
        "git_revision": git_revision(),
        "tracking": tracking or {},
    }


def atomic_checkpoint_io() -> Any:
    """Lightning CheckpointIO that writes each checkpoint to a temporary file, then renames it, and reads
    one to resume from through `read_checkpoint` (integrity check, `weights_only=True`), as inference does."""
    from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

    class AtomicCheckpointIO(TorchCheckpointIO):
        def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
            atomic_write(path, lambda f: torch.save(checkpoint, f))

        def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: Any = None) -> dict[str, Any]:
            return read_checkpoint(path)  # on CPU; Lightning moves the state where it belongs

        def remove_checkpoint(self, path: Any) -> None:
            Path(path).unlink(missing_ok=True)

    return AtomicCheckpointIO()
