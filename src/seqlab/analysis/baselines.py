"""Reference points that need no model: the lead (first sentence) baseline for summarization.

`seqlab baselines [--corpus debian_pkg_summaries] [--split test]` prints ROUGE of the lead baseline.
"""

from __future__ import annotations

from seqlab.metrics.text import split_sentences


def lead(document: str) -> str:
    """The first sentence: text up to the first '.', '!' or '?' followed by space, or the first line."""
    sentences = split_sentences(document)
    return sentences[0] if sentences else ""
