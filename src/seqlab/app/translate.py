"""Translate or summarize text: `seqlab translate ckpt=PATH [decoding=beam] [input=FILE] < in > out`.

One output line per input line, in input order, on stdout (an empty line for an empty
line); `format=fairseq` prints fairseq's S-/H-/P- lines with `decoding.n_best` hypotheses.
Logs and progress go to stderr, so `... < in.txt > out.txt` gives a clean file. On a
terminal it is interactive: a prompt per line, answered at once.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from seqlab.app.cli import reraise
from seqlab.app.infer import InferenceRequest, TranslateSettings, chosen_engine, load
from seqlab.app.store import CONF_DIR
from seqlab.config import ConfigError
from seqlab.decoding import DecodingConfig
from seqlab.inference.text import NO_PREFIX, TargetPrefix, format_output, translate, translate_stream
from seqlab.memory import keep_freed_memory
from seqlab.progress import Progress

log = logging.getLogger("seqlab.translate")


def run_translate(cfg: DictConfig, stdin: Any = None, stdout: Any = None) -> int:
    """Translate `input` (or stdin) to stdout; returns the number of lines."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    # on a terminal (or chunk_size=1) each call decodes one source: engine=auto weighs such a step's products
    one_source = cfg.input is None and stdin.isatty() or cfg.chunk_size == 1
    request = InferenceRequest.from_cfg(cfg, "translate", TranslateSettings,  # fails here, before loading
                                        engine=chosen_engine(cfg, one_source))
    if cfg.format == "plain" and request.decoding.n_best > 1:
        raise ConfigError("decoding.n_best > 1 prints several hypotheses per line: add format=fairseq")
    keep_freed_memory()
    loaded = load(request, cfg.device, Path(cfg.paths.cache_dir))
    log.info("%s (step %d), %s: %s", loaded.info.path, loaded.info.step, request.label, loaded.decoding.label)
    # the engine decodes in the request's precision (decoding.engine: seqlab's search under bf16 autocast)
    return _translate_all(cfg, loaded.model, loaded.tokenizer, loaded.decoding, stdin, stdout, loaded.engine)


def _translate_all(cfg: DictConfig, model: Any, tokenizer: Any, decoding: DecodingConfig, stdin: Any,
                   stdout: Any, engine: Any = None) -> int:
    prefix = TargetPrefix(bool(cfg.prefix_column), cfg.target_prefix)
    if cfg.input is None and stdin.isatty():
        return interactive(model, tokenizer, decoding, cfg.format, stdin, stdout, engine, prefix)
    progress = Progress(total=None, desc="translating")  # lines are read as they come: no total, no ETA
    if cfg.input is not None:
        with open(cfg.input, encoding="utf-8") as f:
            n = translate_stream(model, tokenizer, f, stdout, decoding, cfg.format, cfg.max_tokens, cfg.chunk_size,
                                 progress, engine, prefix)
    else:
        n = translate_stream(model, tokenizer, stdin, stdout, decoding, cfg.format, cfg.max_tokens, cfg.chunk_size,
                             progress, engine, prefix)
    log.info("translated %d lines", n)
    return n


def interactive(model: Any, tokenizer: Any, decoding: DecodingConfig, fmt: str, stdin: Any, stdout: Any,
                engine: Any = None, prefix: TargetPrefix = NO_PREFIX) -> int:
    """A prompt per line (on stderr), each answered at once; Ctrl-D ends."""
    n = 0
    while True:
        print("> ", end="", file=sys.stderr, flush=True)
        line = stdin.readline()
        if not line:
            return n
        source = line.rstrip("\n")
        hyps = translate(model, tokenizer, [source], decoding, engine=engine, prefix=prefix, first_line=n + 1)[0]
        stdout.write(format_output(n, source, hyps, fmt))
        stdout.flush()
        n += 1


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="translate")
def main(cfg: DictConfig) -> None:
    try:
        run_translate(cfg)
    except Exception as err:
        reraise("translate", err)


def run() -> int:
    """`seqlab translate`."""
    main()
    return 0
