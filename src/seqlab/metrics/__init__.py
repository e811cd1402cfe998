"""Metrics: sacreBLEU, ROUGE, log-probs, lengths and diversity, under the names in `keys`."""

from seqlab.metrics.diversity import corpus_distinct, distinct_n, repetition, sample_diversity
from seqlab.metrics.logprob import logprob_summary
from seqlab.metrics.rouge import rouge_scores
from seqlab.metrics.text import by_source_length, intervals, sacrebleu_scores

__all__ = ["by_source_length", "corpus_distinct", "distinct_n", "intervals", "logprob_summary", "repetition",
           "rouge_scores", "sacrebleu_scores", "sample_diversity"]
