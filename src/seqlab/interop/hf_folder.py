"""A Hugging Face model folder read as `from_pretrained` reads it, without transformers: a local folder or a
hub name resolved in the local hub cache (never downloaded), its config.json, and its weights:
`model.safetensors` first, then a sharded safetensors index, then a pickled `pytorch_model.bin` (or its
index) loaded with `torch.load(weights_only=True)` only, so loading never runs code from the file.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from seqlab import hub
from seqlab.interop.families import InteropError

SAFETENSORS, SAFETENSORS_INDEX = "model.safetensors", "model.safetensors.index.json"
PICKLE, PICKLE_INDEX = "pytorch_model.bin", "pytorch_model.bin.index.json"


def resolve_folder(name: str | Path, revision: str = "main") -> Path:
    """hub.resolve_folder, its error an InteropError (what import and export callers catch)."""
    try:
        return hub.resolve_folder(name, revision)
    except hub.HubError as err:
        raise InteropError(str(err)) from None


def read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InteropError(f"{path}: missing; a Hugging Face model folder has one (save_pretrained writes "
                           "it)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InteropError(f"{path}: not valid JSON ({err}); re-copy the file") from None
    if not isinstance(value, dict):
        raise InteropError(f"{path}: expected a JSON object")
    return value


def load_safetensors(path: Path) -> dict[str, Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise InteropError(f"{path}: cannot be read as safetensors ({err}); the file is truncated or corrupt") from None


def load_pickle(path: Path) -> dict[str, Tensor]:
    """A pickled state dict through torch.load(weights_only=True): tensors and plain containers only."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        first = str(err).strip().splitlines()[0][:200]
        raise InteropError(f"{path}: does not load with torch.load(weights_only=True) ({first}); it holds objects "
                           "other than tensors. Convert it to model.safetensors where you trust the file") from None
    except (RuntimeError, EOFError, ValueError, OSError) as err:
        raise InteropError(f"{path}: cannot be read ({type(err).__name__}: {str(err)[:200]}); the file is "
                           "truncated or corrupt") from None
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise InteropError(f"{path}: not a state dict of tensors")
    return state


def read_weights(folder: Path) -> dict[str, Tensor]:
    """The folder's state dict: safetensors first, whole or sharded, then the pickled forms."""
    for name, index, load in ((SAFETENSORS, SAFETENSORS_INDEX, load_safetensors),
                              (PICKLE, PICKLE_INDEX, load_pickle)):
        if (folder / name).is_file():
            return load(folder / name)
        if (folder / index).is_file():
            weight_map = read_json(folder / index).get("weight_map")
            if not isinstance(weight_map, dict):
                raise InteropError(f"{folder / index}: has no weight_map")
            state: dict[str, Tensor] = {}
            for shard in sorted(set(weight_map.values())):
                if not (folder / shard).is_file():
                    raise InteropError(f"{folder / shard}: a shard {index} lists is missing; re-copy the folder")
                state.update(load(folder / shard))
            missing = sorted(set(weight_map) - set(state))
            if missing:
                raise InteropError(f"{folder / index}: names {missing[:3]} that no shard holds")
            return state
    raise InteropError(f"{folder}: no {SAFETENSORS}, {SAFETENSORS_INDEX}, {PICKLE} or {PICKLE_INDEX}; "
                       "not a Hugging Face model folder")
