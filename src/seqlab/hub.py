"""Hugging Face hub folders found offline: a local folder as it is, or a hub name resolved in the local hub cache
the way `from_pretrained(..., local_files_only=True)` resolves it. seqlab never downloads; a name that is not
in the cache is an error that says where it looked and how to fetch it."""

from __future__ import annotations

import os
import re
from pathlib import Path

# `org/model`, or a legacy name without an organisation (`roberta-large`, `xlm-roberta-large`)
HUB_NAME = re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")


class HubError(ValueError):
    """A model folder that is neither a folder nor in the local hub cache."""


def hub_cache() -> Path:
    """Where huggingface_hub keeps downloads: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = Path(os.environ.get("HF_HOME", Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")) / "huggingface"))
    return home.expanduser() / "hub"


def resolve_folder(name: str | Path, revision: str = "main") -> Path:
    """A local folder as it is, or a hub name as the snapshot its cached `refs/<revision>` names (the cache
    layout `models--org--model/snapshots/<commit>/`)."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if not HUB_NAME.match(str(name)):
        raise HubError(f"{name}: no such folder, and not a hub name such as facebook/bart-large-cnn")
    repo = hub_cache() / f"models--{str(name).replace('/', '--')}"
    ref = repo / "refs" / revision
    commit = ref.read_text().strip() if ref.is_file() else revision
    snapshot = repo / "snapshots" / commit
    if not snapshot.is_dir():
        raise HubError(f"{name}: not in the local Hugging Face cache ({repo}); seqlab does not download. "
                       f"Fetch it where the hub is reachable (huggingface-cli download {name}), copy the "
                       "cache here (or set HF_HUB_CACHE), or pass the model's folder")
    return snapshot


def snapshot_id(folder: Path) -> str:
    """The cached commit a resolved folder is (its snapshot's name), or `local` for a folder outside the cache:
    what a metric's signature names as the model's version."""
    parts = folder.resolve().parts
    cache = hub_cache().resolve().parts
    if len(parts) >= 2 and parts[:len(cache)] == cache and parts[-2] == "snapshots":
        return parts[-1][:12]
    return "local"
