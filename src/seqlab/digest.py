"""What identifies contents: a file's SHA-256 (memoized), and short stable keys of settings for cache and
result folders."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from seqlab.io import atomic_write_text


def file_digest(path: Path | str, memo_dir: Path | None = None, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file's contents, read in chunks; remembered per (path, size, mtime, ctime, inode).

    Identifies a file by what it holds: an edit that keeps size and mtime (`cp -p`,
    rsync, tar) still changes the digest. The memo makes repeated calls free; ctime
    changes on every write and cannot be set back, so a stale memo entry never matches.
    With `memo_dir` the memo outlives the process (one small file per identity, named by
    its hash): a warm start does not re-read a multi-GB corpus to find its cache.
    """
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    if key in _DIGESTS:
        return _DIGESTS[key]
    memo = Path(memo_dir) / f"{cache_key(list(key))}.sha256" if memo_dir is not None else None
    digest = memo.read_text().strip() if memo is not None and memo.is_file() else ""
    if len(digest) != 64:  # no memo, or a damaged one
        digest = _sha256(path, chunk)
        if memo is not None:
            atomic_write_text(memo, digest)
    _DIGESTS[key] = digest
    return digest


def _sha256(path: Path, chunk: int) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


_DIGESTS: dict[tuple[str, int, int, int, int], str] = {}


def cache_key(data: Any) -> str:
    """A short stable hash of JSON-able settings (cache folders, result folders, variants)."""
    return hashlib.sha1(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]
