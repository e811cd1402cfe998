"""How every argparse command is built and run alike: `seqlab <name>` as its program name, its docstring as
its help, logging set up once, the allocator tuned for the tensors it frees and allocates again, and one
contract for its outcome: exit status 0 when done, 1 when some of its work failed (it says which), 2 on bad
input (an argument, a config value, a checkpoint, a result folder), with a message `seqlab <name>: ...`
that names what to change. The Hydra commands (train, evaluate, translate, bench) end a single run's bad
input the same way through `reraise`, where Hydra would print a traceback and exit with status 1."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import NoReturn

from seqlab.analysis.compare import CompareError
from seqlab.checkpoint import CheckpointError
from seqlab.config import ConfigError
from seqlab.data import CorpusError
from seqlab.interop.hf import InteropError
from seqlab.memory import keep_freed_memory
from seqlab.metrics.neural.errors import MetricModelError

log = logging.getLogger("seqlab")


class CommandError(ValueError):
    """Bad input a command finds itself (not a config's or a checkpoint's): the message says what to change."""


BAD_INPUT = (CommandError, ConfigError, CheckpointError, CompareError, InteropError, CorpusError, MetricModelError)


def parser(name: str, doc: str | None) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog=f"seqlab {name}", description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def run(name: str, args_parser: argparse.ArgumentParser, argv: list[str] | None,
        body: Callable[[argparse.Namespace], int | None], level: int = logging.INFO) -> int:
    """Parse `argv` (argparse exits 2 on a bad flag), set up logging and the allocator, run `body`; bad
    input becomes exit status 2 with the message prefixed `seqlab <name>:`."""
    args = args_parser.parse_args(argv)
    logging.basicConfig(level=level, format="%(message)s")
    keep_freed_memory()
    try:
        return int(body(args) or 0)
    except BAD_INPUT as err:
        print(f"seqlab {name}: {err}", file=sys.stderr)
        return 2


def reraise(name: str, err: Exception) -> NoReturn:
    """End a single Hydra run that failed: bad input as `seqlab <name>: ...` on stderr and exit status 2, like
    the argparse commands; anything else goes on to Hydra, which prints its traceback and exits with 1."""
    if isinstance(err, BAD_INPUT):
        print(f"seqlab {name}: {err}", file=sys.stderr)
        raise SystemExit(2) from err
    raise err
