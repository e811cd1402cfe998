"""`seqlab baselines [--corpus NAME]`: the lead baseline's ROUGE on a summarization corpus's split."""

from __future__ import annotations

import argparse

from seqlab.analysis.baselines import lead
from seqlab.app import cli
from seqlab.data.corpora import CorpusConfig, load_split
from seqlab.metrics import rouge_scores


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser("baselines", __doc__)
    parser.add_argument("--corpus", default="debian_pkg_summaries", help="embedded corpus folder under data/")
    parser.add_argument("--src_field", default="document")
    parser.add_argument("--tgt_field", default="summary")
    parser.add_argument("--split", default="test")
    return cli.run("baselines", parser, argv, body)


def body(args: argparse.Namespace) -> int:
    corpus = CorpusConfig(name=args.corpus, kind="embedded", task="summarization", path=args.corpus,
                          src_field=args.src_field, tgt_field=args.tgt_field)
    examples = load_split(corpus, args.split)
    scores = rouge_scores([lead(e.source) for e in examples], [e.target for e in examples])
    print(" ".join(f"{k}={v:.1f}" for k, v in scores.items()))
    return 0
