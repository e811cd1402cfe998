"""Reference points that need no model: the lead (first sentence) baseline for summarization.

`python -m seqlab.baselines [--corpus debian_pkg_summaries] [--split test]` prints ROUGE of the lead baseline.
"""

from __future__ import annotations

import argparse

from seqlab.data.corpora import CorpusConfig, load_split
from seqlab.metrics import rouge_scores
from seqlab.metrics.text import split_sentences


def lead(document: str) -> str:
    """The first sentence: text up to the first '.', '!' or '?' followed by space, or the first line."""
    sentences = split_sentences(document)
    return sentences[0] if sentences else ""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", default="debian_pkg_summaries", help="embedded corpus folder under data/")
    parser.add_argument("--src_field", default="document")
    parser.add_argument("--tgt_field", default="summary")
    parser.add_argument("--split", default="test")
    args = parser.parse_args(argv)
    corpus = CorpusConfig(name=args.corpus, kind="embedded", task="summarization", path=args.corpus,
                          src_field=args.src_field, tgt_field=args.tgt_field)
    examples = load_split(corpus, args.split)
    scores = rouge_scores([lead(e.source) for e in examples], [e.target for e in examples])
    print(" ".join(f"{k}={v:.1f}" for k, v in scores.items()))


if __name__ == "__main__":
    main()
