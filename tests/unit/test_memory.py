"""Process-level speed settings: glibc keeps freed blocks, so large tensors reuse their pages, until released."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys

import pytest

# glibc's malloc, free and mallinfo2 through ctypes, for code run in a process of its own
MALLINFO = """
import ctypes, ctypes.util
libc = ctypes.CDLL(ctypes.util.find_library("c"))
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
"""
# Runs in a fresh interpreter: mallopt changes the whole process, and the test must see glibc's
# defaults before keep_freed_memory. A 256 MiB block is malloc'ed, written and freed; mallinfo2
# reports whether it came from mmap (hblkhd grows) and whether free gave the heap back to the OS (arena).
PROBE = MALLINFO + """
import json, sys
from seqlab.memory import keep_freed_memory, release_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else None
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


def probe(mode: str, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True,
                         env=None if env is None else {**os.environ, **env})
    return json.loads(out.stdout)


GLIBC = pytest.mark.skipif(not sys.platform.startswith("linux") or ctypes.util.find_library("c") is None,
                           reason="glibc's malloc settings exist on Linux only")


@GLIBC
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
    # SEQLAB_KEEP_FREED_MEMORY=0: the commands leave glibc's defaults
    opted_out = probe("keep", {"SEQLAB_KEEP_FREED_MEMORY": "0"})
    assert opted_out["applied"] is False and opted_out["mmapped"] >= 256 << 20


# A stand-in for ctranslate2 in the engine's own process: its "translation" is how many bytes of a 256 MiB
# block glibc served with mmap there.
FAKE_CT2 = MALLINFO + """
from types import SimpleNamespace


class Translator:
    def __init__(self, path, **options):
        pass

    def translate_batch(self, batch):
        before = libc.mallinfo2().hblkhd
        block = libc.malloc(256 << 20)
        mmapped = libc.mallinfo2().hblkhd - before
        libc.free(block)
        return [SimpleNamespace(hypotheses=[[str(mmapped)]])]
"""


@GLIBC
def test_ctranslate2s_own_process_runs_under_the_allocator_the_bench_sets(tmp_path, monkeypatch):
    """A bench's ratio compares the toolkits, not two malloc settings: CTranslate2's process keeps freed blocks
    too (its large blocks come from the heap, not mmap)."""
    from seqlab.engines.own_process import OwnProcess

    (tmp_path / "ctranslate2.py").write_text(FAKE_CT2)
    monkeypatch.syspath_prepend(str(tmp_path))  # the process's PYTHONPATH is this one's sys.path
    try:
        mmapped = OwnProcess("Translator", "unused").translate_batch([["a"]])[0].hypotheses[0][0]
    except RuntimeError as err:
        if "mallinfo2" in str(err):
            pytest.skip("glibc older than 2.33 (no mallinfo2)")
        raise
    assert mmapped == "0"


def test_every_bench_mode_sets_the_allocator_first(tmp_path, monkeypatch):
    """`seqlab bench` times seqlab under the allocator its commands run under, whatever the mode: the call comes
    before the config is read (here a refused one)."""
    import seqlab.app.bench as bench

    calls = []
    monkeypatch.setattr(bench, "keep_freed_memory", lambda: calls.append(True))
    monkeypatch.setattr(sys, "argv", ["seqlab bench", "shapes=[gpt2]", f"hydra.run.dir={tmp_path}",
                                      "hydra.output_subdir=null"])
    with pytest.raises(SystemExit) as exit_:
        bench.main()
    assert exit_.value.code == 2 and calls == [True]
