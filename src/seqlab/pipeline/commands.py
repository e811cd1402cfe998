"""How the runner runs a stage and keeps its record: each stage a seqlab command in its own process, each
record committed into the checkout as it lands."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

Command = Callable[..., bool]  # seqlab(*args) -> whether it succeeded; tests pass a fake


def seqlab(*args: str) -> bool:
    """Run a seqlab command in its own process (a crash or OOM ends that step only); whether it succeeded."""
    return subprocess.run([sys.executable, "-m", "seqlab", *args]).returncode == 0


def commit_archive(archive: Path, message: str) -> None:
    """Commit the archive folder alone (other staged work stays staged); a busy index is retried, then left
    for the next record's commit."""
    archive = archive.resolve()  # git runs in the archive: a path relative to here would not be found there
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=archive, capture_output=True, text=True)
    if top.returncode != 0:
        print(f"{archive} is not in a git checkout; records are not committed", file=sys.stderr)
        return
    for attempt in range(5):
        add = subprocess.run(["git", "add", "--", str(archive)], cwd=archive, capture_output=True, text=True)
        done = add.returncode == 0 and subprocess.run(
            ["git", "commit", "--quiet", "-m", message, "--", str(archive)], cwd=archive, capture_output=True,
            text=True).returncode == 0
        if done:
            return
        time.sleep(2 * (attempt + 1))
    print(f"could not commit {archive} ({message}); the next record's commit takes it along", file=sys.stderr)
