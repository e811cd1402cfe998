"""The process's allocator, tuned explicitly by the commands (never at import): large freed blocks kept for
the next step instead of being unmapped, and handed back on demand before a peak-memory measurement."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
import sys

log = logging.getLogger(__name__)
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc mallopt parameters
# mallopt's value is a C int, and ctypes silently keeps the low 32 bits of a larger Python int
# (1 << 36 arrives as 0, which trims the heap at every free): the largest int, 2 GiB, is the cap.
TRIM_THRESHOLD = (1 << 31) - 1
OPT_OUT = "SEQLAB_KEEP_FREED_MEMORY"  # =0: leave glibc's defaults (a process that must hand memory back at once)


def keep_freed_memory() -> bool:
    """Stop glibc returning large blocks to the OS after every free.

    Training and decoding allocate and free the same large tensors (the (tokens, vocab)
    logits, for one) every step. By default glibc serves each with a fresh mmap and
    unmaps it on free, so every step pays page faults for hundreds of MB: measured on
    the 2-core dev CPU, training went from 4.4k to 6.9k tokens/s with this setting.
    The trim threshold matters as much: at 0 glibc hands the top of the heap back at
    every free, and the (tokens, vocab) buffers fault in again (bf16 training on the
    Bible corpus's batches: 13.3-14.1k tokens/s with it at 0, 16.2-16.8k at 2 GiB).
    CTranslate2 gains as much at a bench's shapes (its own process is given the same setting: engines.own_process).
    SEQLAB_KEEP_FREED_MEMORY=0 leaves glibc's defaults. Returns whether it was applied (glibc on Linux only).
    """
    libc = _glibc()
    if libc is None or os.environ.get(OPT_OUT) == "0":
        return False
    ok = libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if ok:
        log.debug("glibc: mmap for large blocks off, trim threshold 2 GiB")
    return ok


def release_freed_memory() -> bool:
    """Hand the heap's free memory back to the OS now (glibc's malloc_trim).

    Why: with `keep_freed_memory` the process's resident size never shrinks, so a peak-RSS
    measurement would report the largest of all earlier phases; trimming first makes the next
    peak that phase's own. Returns whether anything was released (False off glibc).
    """
    libc = _glibc()
    return libc is not None and libc.malloc_trim(0) == 1


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc on Linux (mallopt and malloc_trim are glibc's), else None;
    looked up once per process."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]  # (glibc has both; musl has neither)
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):
        return None
    return libc
