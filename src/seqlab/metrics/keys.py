"""Metric and statistic keys, defined once: every run logs the same keys, so dashboards line up. What each
quality metric is (how computed, tested, shown) is its declaration in metrics.declarations."""

from typing import Final

BLEU: Final = "bleu"
CHRF: Final = "chrf"
CHRFPP: Final = "chrfpp"  # chrF++: chrF with word unigrams and bigrams (sacreBLEU's CHRF(word_order=2))
TER: Final = "ter"  # translation edit rate, lower is better (sacreBLEU's TER)
ROUGE1: Final = "rouge1"
ROUGE2: Final = "rouge2"
ROUGEL: Final = "rougeL"
ROUGELSUM: Final = "rougeLsum"
COMET: Final = "comet"  # COMET (reference-based; x100)
COMETKIWI: Final = "cometkiwi"  # CometKiwi (reference-free quality estimation; x100)
BERTSCORE: Final = "bertscore"  # BERTScore F1 (x100)
BERTSCORE_P: Final = "bertscore_precision"
BERTSCORE_R: Final = "bertscore_recall"
METRICX: Final = "metricx"  # MetricX: an error score on 0-25, lower is better
HYP_TOKEN_LOGPROB: Final = "hyp_logprob_per_token"
HYP_SEQ_LOGPROB: Final = "hyp_logprob_per_seq"
REF_TOKEN_LOGPROB: Final = "ref_logprob_per_token"
REF_SEQ_LOGPROB: Final = "ref_logprob_per_seq"
REF_PPL: Final = "ref_perplexity"
LENGTH_RATIO: Final = "length_ratio"
HYP_LEN: Final = "hyp_len_words"
REF_LEN: Final = "ref_len_words"
HYP_TOKENS: Final = "hyp_len_tokens"
DISTINCT1: Final = "distinct1"
DISTINCT2: Final = "distinct2"
SAMPLE_DISTINCT1: Final = "sample_distinct1"
SAMPLE_DISTINCT2: Final = "sample_distinct2"
SELF_BLEU: Final = "self_bleu"
REPEATED_3GRAM: Final = "repeated_3gram"  # % of hypotheses with a repeated word 3-gram
REPEATED_4GRAM: Final = "repeated_4gram"
EMPTY_SHARE: Final = "empty_share"  # % of empty hypotheses
SHORT_SHARE: Final = "short_share"  # % of hypotheses under half their reference's length (words)
TOKENS_PER_S: Final = "decode_tokens_per_s"
DECODE_SECONDS: Final = "decode_seconds"  # the whole decoding of the test set (MBR: candidates + utilities)
GENERATE_SECONDS: Final = "generate_seconds"  # MBR: generating the candidates
MBR_SECONDS: Final = "mbr_seconds"  # MBR: the utility matrices and the choice
DRAFT_ACCEPTANCE: Final = "draft_acceptance"  # speculative decoding: the share of proposed tokens kept
TOKENS_PER_CALL: Final = "draft_tokens_per_call"  # speculative decoding: tokens per row and decoder call
DRAFT_SECONDS: Final = "draft_seconds"  # speculative decoding: the time spent proposing
MBR_EXPECTED_UTILITY: Final = "mbr_expected_utility"  # mean over sources of the chosen candidate's estimate
MBR_DISTINCT: Final = "mbr_distinct_candidates"  # mean distinct texts among a source's candidates
SENTENCES_PER_S: Final = "decode_sentences_per_s"
CONSTRAINTS_MET: Final = "constraints_met"  # % of lexical constraints the best hypotheses contain
CONSTRAINED_ALL_MET: Final = "constrained_all_met"  # % of sources whose best hypothesis contains all of its own

# source-length buckets in subword tokens (EOS not counted): (label, lowest, highest or None)
LENGTH_BUCKETS: Final = (("src_le16", 1, 16), ("src_17_32", 17, 32), ("src_33_64", 33, 64), ("src_gt64", 65, None))
SHARE: Final = "share"  # a length bucket's % of the test set

SEGMENT_SCORES: Final = "segment_scores"  # a record's per-segment neural metric scores (hypotheses.jsonl)
METRIC_ERRORS: Final = "metric_errors"  # metrics.json: the metrics that failed after decoding, and why


def signature(metric: str) -> str:
    """The key of a metric's signature (what computed it), as sacreBLEU's metrics have theirs."""
    return f"{metric}_signature"


def bucket_title(label: str) -> str:
    """How a table heads a length bucket: <= 16, 17-32, 33-64, > 64."""
    _, low, high = next(b for b in LENGTH_BUCKETS if b[0] == label)
    if label == LENGTH_BUCKETS[0][0]:
        return f"<= {high}"
    return f"{low}-{high}" if high else f"> {low - 1}"


def bucket(metric: str, label: str) -> str:
    """The key of a metric on one source-length bucket, e.g. bleu_src_17_32 (share_src_17_32: its % of
    the test set)."""
    return f"{metric}_{label}"


def ci(metric: str) -> str:
    """The key of a metric's 95% confidence interval, `[low, high]`, in metrics.json."""
    return f"{metric}_ci"
