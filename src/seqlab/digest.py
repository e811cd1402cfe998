"""What identifies contents: a file's SHA-256 (memoized), and short stable keys of settings for cache and
result folders."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def file_digest(path: Path | str, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file's contents, read in chunks; remembered per (path, size, mtime, ctime, inode).

    Identifies a file by what it holds: an edit that keeps size and mtime (`cp -p`,
    rsync, tar) still changes the digest. The memo makes repeated calls free; ctime
    changes on every write and cannot be set back, so a stale memo entry never matches.
    """
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with path.open("rb") as f:
            while block := f.read(chunk):
                h.update(block)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


_DIGESTS: dict[tuple[str, int, int, int, int], str] = {}


def cache_key(data: Any) -> str:
    """A short stable hash of JSON-able settings (cache folders, result folders, variants)."""
    return hashlib.sha1(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]
