"""`seqlab params [--d_model 512 ...]` (`make params`): the parameter table, analytic against counted, of one shape."""

from __future__ import annotations

import argparse

from seqlab.model.config import ModelConfig
from seqlab.model.params import count_parameters, format_table


def main(argv: list[str] | None = None) -> None:
    """`python -m seqlab.model.params --d_model 512 ...`: print the table for one config."""
    from seqlab.model.transformer import Seq2SeqTransformer

    parser = argparse.ArgumentParser(prog="seqlab params", description=main.__doc__)
    parser.add_argument("--vocab", type=int, default=37000, help="shared vocabulary size")
    for name, default in (("d_model", 512), ("n_heads", 8), ("encoder_layers", 6),
                          ("decoder_layers", 6), ("d_ff", 2048)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--tie_embeddings", default="all")
    parser.add_argument("--positions", default="sinusoidal")
    parser.add_argument("--norm_position", default="post")
    parser.add_argument("--copy_attention", action="store_true", help="add a pointer-generator output")
    args = vars(parser.parse_args(argv))
    cfg = ModelConfig(src_vocab_size=args.pop("vocab"), **args)
    print(format_table(cfg, count_parameters(Seq2SeqTransformer(cfg))))
