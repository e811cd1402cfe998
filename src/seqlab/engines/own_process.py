"""A CTranslate2 Translator or Generator in a process of its own, for timing it beside PyTorch.

CTranslate2's wheel and PyTorch both run GNU OpenMP. In one process, once CTranslate2 has run a call from
its own thread, PyTorch's worker threads stop spinning between parallel regions and sleep instead, waking at
each (consistent with GNU OpenMP throttling its threads' spinning once it manages more threads than cores).
`benchmarks/ct2_process.py` on the 2-core AVX-512 AMD EPYC, 16 t5-small sources one a call, greedy: seqlab 6.5
and 7.0 s before CTranslate2 first ran in the process (both threads busy throughout), 10.7 and 11.2 s after
(its second thread busy 43%); CTranslate2 5.1 and 5.3 s in a process of its own, 7.0 and 7.7 s in seqlab's.
A user runs one toolkit per process; a bench that alternates them in one process must keep them apart, or it
times both in a state no user is in. Here the engine's calls go through a pipe to a spawned process that holds the
model; the seconds a call spends outside that process's `translate_batch`/`generate_batch` (the pipe, the
pickling) are added up in `overhead` (`CT2Engine.pipe_seconds`), which a timer subtracts.

The process is a fresh interpreter (`python -c`, not multiprocessing's spawn, which would import the caller's
main module again), speaking pickles over its standard input and output; this module imports nothing heavy
at its top, so that process imports ctranslate2 and seqlab.memory only. It sets the allocator as `seqlab bench`
does (seqlab.memory.keep_freed_memory), so that a ratio compares the toolkits, not two malloc settings.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
import weakref
from types import SimpleNamespace
from typing import Any, BinaryIO


def main() -> None:
    """The spawned process: load the model, then answer each (method, args, kwargs) with (ok, hypotheses or
    error, seconds in the call) until None arrives."""
    replies = os.fdopen(os.dup(1), "wb")  # the pipe back; whatever the library prints goes to standard error
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    kind, path, options = pickle.load(requests)
    import ctranslate2

    from seqlab.memory import keep_freed_memory

    keep_freed_memory()  # the allocator seqlab's side runs under (`seqlab bench`), so both sides share it

    engine = getattr(ctranslate2, kind)(path, **options)
    send(replies, (True, None, 0.0))
    while (message := pickle.load(requests)) is not None:
        method, args, kwargs = message
        try:
            start = time.perf_counter()
            results = getattr(engine, method)(*args, **kwargs)
            seconds = time.perf_counter() - start
            send(replies, (True, [[list(h) for h in (r.sequences if hasattr(r, "sequences") else r.hypotheses)]
                                  for r in results], seconds))
        except Exception as err:  # noqa: BLE001  sent back and raised in the caller, named
            send(replies, (False, f"{type(err).__name__}: {err}", 0.0))


def send(stream: BinaryIO, value: Any) -> None:
    pickle.dump(value, stream)
    stream.flush()


class OwnProcess:
    """`ctranslate2.<kind>(path, **options)` in a process of its own: `translate_batch` and `generate_batch` as
    the object's (results with `.hypotheses` / `.sequences` only), `overhead` the seconds spent outside its
    calls."""

    def __init__(self, kind: str, path: str, **options: Any) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.process = subprocess.Popen([sys.executable, "-c", "from seqlab.engines.own_process import main; main()"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        weakref.finalize(self, stop, self.process)
        self.overhead = 0.0
        self._exchange((kind, path, options))  # the model loaded, or its error raised here

    def _exchange(self, message: Any) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:  # a process already gone breaks the pipe as it is written to; one that dies in the call, as it is read
            send(self.process.stdin, message)
            ok, value, seconds = pickle.load(self.process.stdout)
        except (BrokenPipeError, EOFError):
            code = self.process.wait()
            why = ("killed by the system (SIGKILL), most often for want of memory: decode fewer sources a call"
                   if code == -9 else "its error is above")
            raise RuntimeError(f"CTranslate2's own process ended (exit {code}): {why}") from None
        if not ok:
            raise RuntimeError(f"CTranslate2, in its own process: {value}")
        return value, seconds

    def _call(self, method: str, args: tuple, kwargs: dict[str, Any]) -> list[list[list[str]]]:
        start = time.perf_counter()
        value, seconds = self._exchange((method, args, kwargs))
        self.overhead += time.perf_counter() - start - seconds
        return value

    def translate_batch(self, *args: Any, **kwargs: Any) -> list[SimpleNamespace]:
        return [SimpleNamespace(hypotheses=h) for h in self._call("translate_batch", args, kwargs)]

    def generate_batch(self, *args: Any, **kwargs: Any) -> list[SimpleNamespace]:
        return [SimpleNamespace(sequences=h) for h in self._call("generate_batch", args, kwargs)]


def stop(process: subprocess.Popen) -> None:
    """End the process (when its OwnProcess is collected, or at exit)."""
    try:
        assert process.stdin is not None
        send(process.stdin, None)
        process.stdin.close()
        process.wait(timeout=5)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        process.kill()
