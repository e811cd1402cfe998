"""Process-level speed settings: glibc keeps freed blocks, so large tensors reuse their pages, until released."""

from __future__ import annotations

import ctypes.util
import json
import subprocess
import sys

import pytest

# Runs in a fresh interpreter: mallopt changes the whole process, and the test must see glibc's
# defaults before keep_freed_memory. A 256 MiB block is malloc'ed, written and freed; mallinfo2
# reports whether it came from mmap (hblkhd grows) and whether free gave the heap back to the OS (arena).
PROBE = """
import ctypes, ctypes.util, json, sys
from seqlab.memory import keep_freed_memory, release_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else None
libc = ctypes.CDLL(ctypes.util.find_library("c"))
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
size = 256 << 20
before = libc.mallinfo2()
block = libc.malloc(size)
ctypes.memset(block, 1, size)
held = libc.mallinfo2()
libc.free(block)
freed = libc.mallinfo2()
released = release_freed_memory()
trimmed = libc.mallinfo2()
print(json.dumps({"applied": applied, "mmapped": held.hblkhd - before.hblkhd, "heap_held": held.arena,
                  "heap_after_free": freed.arena, "released": released, "heap_after_release": trimmed.arena}))
"""


def probe(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux") or ctypes.util.find_library("c") is None,
                    reason="glibc's malloc settings exist on Linux only")
def test_keep_freed_memory_keeps_large_blocks_in_the_heap():
    try:
        default = probe("default")
    except subprocess.CalledProcessError as err:
        if "mallinfo2" in err.stderr:
            pytest.skip("glibc older than 2.33 (no mallinfo2)")
        raise
    # glibc's defaults: a 256 MiB block is its own mmap, returned to the OS on free.
    assert default["mmapped"] >= 256 << 20
    kept = probe("keep")
    assert kept["applied"] is True
    assert kept["mmapped"] == 0  # served from the heap
    assert kept["heap_held"] >= 256 << 20
    # Still held after free (the trim threshold is 2 GiB): the next large tensor reuses these pages
    # instead of faulting in fresh ones. A threshold that overflowed C's int to 0 trimmed it here.
    assert kept["heap_after_free"] >= 256 << 20
    # ... until release_freed_memory, which the bench calls before measuring a phase's peak RSS.
    assert kept["released"] is True
    assert kept["heap_after_release"] < 64 << 20
