"""Atomic file writes: a temporary file in the same folder, then a rename.

A crash mid-write leaves the old file (or none), never a truncated one.
"""

from __future__ import annotations

import errno
import gzip
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO


def atomic_write(path: Path | str, write: Callable[[IO[bytes]], None]) -> Path:
    """Call `write(f)` on a temporary binary file, fsync it, then rename it to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    recorder = _WriteErrors(os.fdopen(fd, "wb"))
    try:
        with recorder.file:
            write(recorder)  # type: ignore[arg-type]
            recorder.file.flush()
            os.fsync(recorder.file.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes the file private; give it the usual permissions
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if recorder.no_space or (isinstance(err, OSError) and err.errno == errno.ENOSPC):
            raise OSError(errno.ENOSPC, f"no space left on device while writing {path}; the previous "
                                        "version (if any) is unchanged; free some space and retry") from err
        raise
    return path


class _WriteErrors:
    """A file wrapper that remembers a disk-full error, which writers such as torch.save re-raise as
    an unrelated RuntimeError ("enforce fail at inline_container.cc")."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file, self.no_space = file, False

    def write(self, data: bytes) -> int:
        try:
            return self.file.write(data)
        except OSError as err:
            self.no_space = self.no_space or err.errno == errno.ENOSPC
            raise

    def __getattr__(self, name: str):  # noqa: ANN204  flush, tell, seek, fileno ... of the real file
        return getattr(self.file, name)


def atomic_write_text(path: Path | str, text: str) -> Path:
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def publish_once(path: Path | str, data: bytes) -> bool:
    """Write `data` to `path` unless it exists, atomically; True if this call wrote it.

    The file is written under a temporary name and then hard-linked into place,
    which fails if another process published first: the first writer wins and
    everybody reads the same bytes afterwards (a rename would let the last win).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        Path(tmp).unlink(missing_ok=True)


def atomic_write_lines_gz(path: Path | str, lines: Sequence[str]) -> Path:
    """One line per item, gzip without a timestamp (the same lines always give the same bytes), atomically. An
    item with a line break of its own would shift every later line: refused (`one_line` makes one of it)."""
    broken = next((i for i, line in enumerate(lines) if "\n" in line), None)
    if broken is not None:
        raise ValueError(f"{path}: item {broken} holds a line break; write one_line(item)")
    data = gzip.compress("".join(f"{line}\n" for line in lines).encode(), mtime=0)
    return atomic_write(path, lambda f: f.write(data))


def one_line(text: str) -> str:
    """A decoded output on one line: its own line breaks (a sampled newline token) become spaces, as sacreBLEU's
    13a tokenizer and chrF read them, so the archived line scores as the output did."""
    return text.replace("\n", " ")


def read_lines_gz(path: Path | str) -> list[str]:
    """What atomic_write_lines_gz wrote: every line, an empty last one included."""
    return gzip.decompress(Path(path).read_bytes()).decode().split("\n")[:-1]
