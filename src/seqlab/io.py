"""Atomic file writes: a temporary file in the same folder, then a rename.

A crash mid-write leaves the old file (or none), never a truncated one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


def atomic_write(path: Path | str, write: Callable[[IO[bytes]], None]) -> Path:
    """Call `write(f)` on a temporary binary file, fsync it, then rename it to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes the file private; give it the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: Path | str, text: str) -> Path:
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))
