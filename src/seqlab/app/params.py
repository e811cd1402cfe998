"""`seqlab params [--d_model 512 ...]` (`make params`): the parameter table, analytic against counted, of one shape.

Every option's default is ModelConfig's (the Transformer base shape), so the table with no options is the
model a config with no model overrides builds, with a 37k shared vocabulary.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import get_args, get_type_hints

from seqlab.app import cli
from seqlab.model import build_model
from seqlab.model.config import ModelConfig
from seqlab.model.params import count_parameters, param_table

SIZES = ("d_model", "n_heads", "encoder_layers", "decoder_layers", "d_ff")
CHOICES = ("architecture", "tie_embeddings", "positions", "norm_position", "norm", "activation")
FLAGS = {"copy_attention": "add a pointer-generator output", "gated_ffn": "a gated feed-forward (GEGLU, SwiGLU)",
         "no_bias": "no biases on the projections (bias=false)"}


def main(argv: list[str] | None = None) -> int:
    defaults = {f.name: f.default for f in fields(ModelConfig)}
    hints = get_type_hints(ModelConfig)
    parser = cli.parser("params", __doc__)
    parser.add_argument("--vocab", type=int, default=37000, help="shared vocabulary size")
    for name in SIZES:
        parser.add_argument(f"--{name}", type=int, default=defaults[name])
    for name in CHOICES:
        parser.add_argument(f"--{name}", default=defaults[name], choices=get_args(hints[name]))
    parser.add_argument("--d_head", type=int, default=None, help="each head's size (default d_model / n_heads)")
    parser.add_argument("--kv_heads", type=int, default=None, help="key/value heads (grouped-query attention)")
    for name, text in FLAGS.items():
        parser.add_argument(f"--{name}", action="store_true", help=text)
    return cli.run("params", parser, argv, body)


def body(args: argparse.Namespace) -> int:
    values = vars(args)
    values["bias"] = not values.pop("no_bias")
    cfg = ModelConfig(src_vocab_size=values.pop("vocab"), **values)  # ConfigError: exit status 2, naming the key
    print(param_table(cfg, count_parameters(build_model(cfg))))
    return 0
