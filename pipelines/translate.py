"""Translate or summarize text: `python pipelines/translate.py ckpt=PATH [decoding=beam] [input=FILE] < in > out`.

One output line per input line, in input order, on stdout (an empty line for an empty
line); `format=fairseq` prints fairseq's S-/H-/P- lines with `decoding.n_best` hypotheses.
Logs and progress go to stderr, so `... < in.txt > out.txt` gives a clean file. On a
terminal it is interactive: a prompt per line, answered at once.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from seqlab.checkpoint import load_for_inference, resolve
from seqlab.config import ConfigError, check_choice, resolve_device
from seqlab.decoding import DecodingConfig, check_precision, precision_context
from seqlab.decoding.mbr import check_task
from seqlab.interop.engines import check_engine, make_engine, run_label
from seqlab.perf import keep_freed_memory
from seqlab.pipeline import checkpoint_decoding, plain, typed
from seqlab.progress import Progress
from seqlab.translate import Format, format_output, translate, translate_stream

log = logging.getLogger("seqlab.translate")


def run_translate(cfg: DictConfig, stdin: Any = None, stdout: Any = None) -> int:
    """Translate `input` (or stdin) to stdout; returns the number of lines."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    check_choice("translate", "format", cfg.format, Format)
    decoding = typed(DecodingConfig, plain(cfg.decoding), "decoding")
    if cfg.format == "plain" and decoding.n_best > 1:
        raise ConfigError("decoding.n_best > 1 prints several hypotheses per line: add format=fairseq")
    keep_freed_memory()
    device = resolve_device("", cfg.device)
    precision, engine_name = str(cfg.get("precision", "fp32")), str(cfg.get("engine", "seqlab"))
    check_precision(precision, "translate")  # before the checkpoint loads
    check_engine("translate", engine_name, precision, decoding)
    ckpt = resolve(str(cfg.ckpt))
    model, tokenizer, info = load_for_inference(ckpt, device=device)
    if cfg.decoding_from_checkpoint:
        decoding = checkpoint_decoding(info)
    if info.data_config:
        corpus = info.data_config["corpus"]
        check_task(decoding.mbr, corpus["task"], f"the checkpoint's corpus {corpus['name']}")
    label = run_label(decoding.label, precision, engine_name)
    log.info("%s (step %d), decoding %s", info.path, info.step, label)
    engine = make_engine(engine_name, ckpt, model, tokenizer, Path(cfg.paths.cache_dir), precision)
    context = precision_context(precision, device) if engine is None else contextlib.nullcontext()
    with context:
        return _translate_all(cfg, model, tokenizer, decoding, stdin, stdout, engine)


def _translate_all(cfg: DictConfig, model: Any, tokenizer: Any, decoding: DecodingConfig, stdin: Any,
                   stdout: Any, engine: Any = None) -> int:
    if cfg.input is None and stdin.isatty():
        return interactive(model, tokenizer, decoding, cfg.format, stdin, stdout, engine)
    progress = Progress(total=None, desc="translating")  # lines are read as they come: no total, no ETA
    if cfg.input is not None:
        with open(cfg.input, encoding="utf-8") as f:
            n = translate_stream(model, tokenizer, f, stdout, decoding, cfg.format, cfg.max_tokens, cfg.chunk_size,
                                 progress, engine)
    else:
        n = translate_stream(model, tokenizer, stdin, stdout, decoding, cfg.format, cfg.max_tokens, cfg.chunk_size,
                             progress, engine)
    log.info("translated %d lines", n)
    return n


def interactive(model: Any, tokenizer: Any, decoding: DecodingConfig, fmt: str, stdin: Any, stdout: Any,
                engine: Any = None) -> int:
    """A prompt per line (on stderr), each answered at once; Ctrl-D ends."""
    n = 0
    while True:
        print("> ", end="", file=sys.stderr, flush=True)
        line = stdin.readline()
        if not line:
            return n
        source = line.rstrip("\n")
        stdout.write(format_output(n, source, translate(model, tokenizer, [source], decoding, engine=engine)[0], fmt))
        stdout.flush()
        n += 1


@hydra.main(version_base="1.3", config_path="../conf", config_name="translate")
def main(cfg: DictConfig) -> None:
    run_translate(cfg)


if __name__ == "__main__":
    main()
