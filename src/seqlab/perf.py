"""Process-level speed settings, applied explicitly by the pipelines (never at import)."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc mallopt parameters


def keep_freed_memory() -> bool:
    """Stop glibc returning large blocks to the OS after every free.

    Training and decoding allocate and free the same large tensors (the (tokens, vocab)
    logits, for one) every step. By default glibc serves each with a fresh mmap and
    unmaps it on free, so every step pays page faults for hundreds of MB: measured on
    the 2-core dev CPU, training went from 4.4k to 6.9k tokens/s with this setting.
    Returns whether it was applied (glibc on Linux only).
    """
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        ok = libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, 1 << 36) == 1
    except (OSError, AttributeError):
        return False
    if ok:
        log.debug("glibc: mmap for large blocks off, trim threshold 64 GiB")
    return ok


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    try:
        text = open("/proc/cpuinfo", encoding="utf-8").read()  # noqa: SIM115
    except OSError:
        return set()
    return set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))


def auto_precision(accelerator: str, flags: set[str] | None = None) -> tuple[str, str]:
    """trainer.precision=auto: (Lightning precision, why).

    CPUs with AMX (`amx_bf16`) multiply bf16 matrices several times faster than fp32, so they train in
    bf16-mixed; without it (AVX512-BF16 alone, or older) bf16 GEMMs are emulated or slower and fp32
    wins. Decided from the flags, not timed at start-up, so one machine always makes the same choice.
    GPUs get bf16-mixed (every GPU seqlab targets has bf16 tensor cores).
    """
    if accelerator == "auto":
        import torch

        accelerator = "gpu" if torch.cuda.is_available() else "cpu"
    if accelerator != "cpu":
        return "bf16-mixed", f"accelerator={accelerator}"
    flags = cpu_flags() if flags is None else flags
    if "amx_bf16" in flags:
        return "bf16-mixed", "the CPU has AMX (amx_bf16): bf16 matrix products are the fast ones"
    has = "avx512_bf16 but no AMX" if "avx512_bf16" in flags else "no AMX"
    return "32-true", f"the CPU has {has}: fp32 matrix products are the fast ones"
