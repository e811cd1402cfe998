"""`seqlab baselines [--corpus NAME]`: the lead baseline's ROUGE on a summarization corpus's split."""

from __future__ import annotations

import argparse
from pathlib import Path

from omegaconf import OmegaConf

from seqlab.app import cli
from seqlab.app.store import CONF_DIR
from seqlab.config import ConfigError, typed
from seqlab.data.corpora import CorpusConfig, load_split
from seqlab.metrics import rouge_scores
from seqlab.metrics.rouge import lead


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser("baselines", __doc__)
    parser.add_argument("--corpus", default="debian_summaries", help="a summarization corpus of conf/data/")
    parser.add_argument("--split", default="test")
    return cli.run("baselines", parser, argv, body)


def corpus_named(name: str) -> CorpusConfig:
    """The corpus of conf/data/NAME.yaml, or a ConfigError listing the names there."""
    path = Path(CONF_DIR) / "data" / f"{name}.yaml"
    if not path.is_file():
        names = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ConfigError(f"--corpus {name}: no {path}; use one of {names}")
    return typed(CorpusConfig, dict(OmegaConf.to_container(OmegaConf.load(path).corpus)), "corpus")


def body(args: argparse.Namespace) -> int:
    corpus = corpus_named(args.corpus)
    if corpus.task != "summarization":
        raise ConfigError(f"--corpus {args.corpus} is a {corpus.task} corpus; the lead baseline is a summary's")
    examples = load_split(corpus, args.split)
    scores = rouge_scores([lead(e.source) for e in examples], [e.target for e in examples])
    print(" ".join(f"{k}={v:.1f}" for k, v in scores.items()))
    return 0
