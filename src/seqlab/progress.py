"""Progress over a known number of items: a bar on a terminal, log lines with an ETA otherwise."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

log = logging.getLogger(__name__)


class Progress:
    """Call with the number of items just finished. On a terminal, tqdm's bar on stderr; in a log or a
    pipe, one line at most every `every` seconds: done/total, rate, ETA (total None: unknown, no ETA)."""

    def __init__(self, total: int | None, desc: str, every: float = 10.0, stream: Any = None) -> None:
        self.total, self.desc, self.every, self.done = total, desc, every, 0
        self.start = self.last = time.perf_counter()
        stream = stream or sys.stderr
        self.bar = None
        if stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, file=stream, unit="sent")

    def __call__(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        now = time.perf_counter()
        finished = self.total is not None and self.done >= self.total
        if now - self.last >= self.every or finished:
            self.last = now
            rate = self.done / max(now - self.start, 1e-9)
            if self.total is None:
                log.info("%s: %d, %.1f/s", self.desc, self.done, rate)
            else:
                eta = (self.total - self.done) / rate if rate > 0 else float("nan")
                log.info("%s: %d/%d, %.1f/s, ETA %.0fs", self.desc, self.done, self.total, rate, eta)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
