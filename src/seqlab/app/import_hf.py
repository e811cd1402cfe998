"""`seqlab import --hf DIR_OR_NAME --out FILE.ckpt` (`make import`): a Hugging Face encoder-decoder (Marian, BART,
mBART, PEGASUS, T5 / Flan-T5 / mT5, M2M100, NLLB) or causal LM (GPT-2, Llama / TinyLlama / SmolLM, Mistral,
Qwen2) as a seqlab checkpoint. A hub name is read from the local Hugging Face cache, never downloaded."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from seqlab.app import cli
from seqlab.interop.importer import import_hf
from seqlab.io import atomic_write


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser("import", __doc__)
    parser.add_argument("--hf", required=True, help="a save_pretrained folder, or a hub name in the local cache "
                                                    "(e.g. facebook/bart-large-cnn)")
    parser.add_argument("--out", required=True, type=Path, help="the seqlab checkpoint to write (.ckpt)")
    parser.add_argument("--src-lang", default=None, help="source language, Hugging Face's name (eng_Latn, en_XX, en)")
    parser.add_argument("--tgt-lang", default=None, help="target language: its code is forced first where the "
                                                         "family does (mBART-50, M2M100, NLLB)")
    parser.add_argument("--task-prefix", default=None, help="text put before every source (T5: 'summarize: ')")
    return cli.run("import", parser, argv, body)


def body(args: argparse.Namespace) -> int:
    try:
        state = import_hf(args.hf, task_prefix=args.task_prefix, src_lang=args.src_lang, tgt_lang=args.tgt_lang)
    except ValueError as err:  # InteropError and ConfigError: the message names the file or key
        raise cli.CommandError(str(err)) from None
    atomic_write(args.out, lambda f: torch.save(state, f))
    print(args.out)
    return 0
