"""Diversity: distinct-n (Li et al. 2016), self-BLEU (Zhu et al. 2018), and repetition within outputs."""

from __future__ import annotations

from collections.abc import Sequence

from seqlab.metrics import keys as K


def ngrams(words: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


def distinct_n(texts: Sequence[str], n: int) -> float:
    """Distinct n-grams over all n-grams in `texts` (whitespace words); 0 when there are none."""
    grams = [g for t in texts for g in ngrams(t.split(), n)]
    return len(set(grams)) / len(grams) if grams else 0.0


def corpus_distinct(hyps: Sequence[str]) -> dict[str, float]:
    """Distinct-1/2 over the whole output of a system: how varied its vocabulary is."""
    return {K.DISTINCT1: distinct_n(hyps, 1), K.DISTINCT2: distinct_n(hyps, 2)}


def has_repeated_ngram(text: str, n: int) -> bool:
    """Whether some n-gram of whitespace words occurs twice in `text` (what no_repeat_ngram_size forbids)."""
    grams = ngrams(text.split(), n)
    return len(set(grams)) < len(grams)


def repetition(hyps: Sequence[str]) -> dict[str, float]:
    """Share (x100) of hypotheses that repeat a 3-gram / a 4-gram of words: the degenerate loops that
    no-repeat n-gram blocking is meant to remove."""
    n = max(len(hyps), 1)
    return {K.REPEATED_3GRAM: 100.0 * sum(has_repeated_ngram(h, 3) for h in hyps) / n,
            K.REPEATED_4GRAM: 100.0 * sum(has_repeated_ngram(h, 4) for h in hyps) / n}


def sample_diversity(samples: Sequence[Sequence[str]]) -> dict[str, float]:
    """Diversity among several outputs per source (samples[i] = the outputs for source i).

    sample_distinct-n: distinct-n within each source's outputs, averaged over sources.
    self_bleu: for each output index j, corpus BLEU of output j against the other
    outputs of the same source as references, averaged over j (lower = more diverse).
    """
    from sacrebleu.metrics import BLEU

    k = min(len(s) for s in samples)
    if k < 2:
        return {}
    d1 = sum(distinct_n(s, 1) for s in samples) / len(samples)
    d2 = sum(distinct_n(s, 2) for s in samples) / len(samples)
    bleu = BLEU()
    self_bleu = 0.0
    for j in range(k):
        hyps = [s[j] for s in samples]
        refs = [[s[i] for s in samples] for i in range(k) if i != j]
        self_bleu += bleu.corpus_score(hyps, refs).score
    return {K.SAMPLE_DISTINCT1: d1, K.SAMPLE_DISTINCT2: d2, K.SELF_BLEU: self_bleu / k}
