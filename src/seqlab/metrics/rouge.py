"""ROUGE by rouge-score (F1 x100 with Porter stemming, the best reference per segment; ROUGE-Lsum over one
sentence per line) and the sentence splitting it and the lead baseline read. Kept apart from metrics.text so
that metrics.declarations can name ROUGE's scoring without importing the rest."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from seqlab.metrics import keys as K

ROUGE_NAMES = (K.ROUGE1, K.ROUGE2, K.ROUGEL, K.ROUGELSUM)  # rouge-score's variants, in one pass


SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n")


def split_sentences(text: str) -> list[str]:
    """Sentences: lines, or text up to '.', '!' or '?' followed by white space."""
    return [s.strip() for s in SENTENCE_END.split(text.strip()) if s.strip()]


def lead(document: str) -> str:
    """The lead baseline of a summary: the document's first sentence (split_sentences)."""
    sentences = split_sentences(document)
    return sentences[0] if sentences else ""


def sentence_per_line(text: str) -> str:
    """The text with one sentence per line, as ROUGE-Lsum reads it (kept if it already has lines)."""
    return text if "\n" in text.strip() else "\n".join(split_sentences(text))


def streams(refs: Sequence[str] | Sequence[Sequence[str]]) -> list[list[str]]:
    """Reference streams from either one stream (a list of strings) or several."""
    if refs and isinstance(refs[0], str):
        return [list(refs)]  # type: ignore[arg-type]
    return [list(r) for r in refs]


def rouge_per_example(hyps: Sequence[str], refs: Sequence[str] | Sequence[Sequence[str]],
                      names: Sequence[str] = ROUGE_NAMES) -> dict[str, list[float]]:
    """F1 (x100) of each ROUGE variant for every example; the best reference when there are several."""
    from rouge_score import rouge_scorer

    logging.getLogger("absl").setLevel(logging.WARNING)  # rouge-score says "Using default tokenizer." per scorer

    ref_streams = streams(refs)
    out: dict[str, list[float]] = {name: [] for name in names}
    plain = [n for n in names if n != K.ROUGELSUM]
    scorers = [(rouge_scorer.RougeScorer(plain, use_stemmer=True), lambda t: t)] if plain else []
    if K.ROUGELSUM in names:
        scorers.append((rouge_scorer.RougeScorer([K.ROUGELSUM], use_stemmer=True), sentence_per_line))
    for i, hyp in enumerate(hyps):
        for scorer, prepare in scorers:
            targets = [prepare(s[i]) for s in ref_streams]
            # rouge-score's order: (target, prediction)
            scores = (scorer.score(targets[0], prepare(hyp)) if len(targets) == 1
                      else scorer.score_multi(targets, prepare(hyp)))
            for name, score in scores.items():
                out[name].append(100.0 * score.fmeasure)
    return out


def rouge_scores(hyps: Sequence[str], refs: Sequence[str] | Sequence[Sequence[str]]) -> dict[str, float]:
    """Mean F1 (x100) of ROUGE-1/2/L/Lsum over the corpus, with stemming."""
    per_example = rouge_per_example(hyps, refs)
    n = max(len(hyps), 1)
    return {name: sum(values) / n for name, values in per_example.items()}
