"""Metrics equal direct calls of sacrebleu and rouge_score; diversity and log-prob summaries by hand."""

from __future__ import annotations

import math

import pytest
import sacrebleu
from rouge_score import rouge_scorer

from seqlab.metrics import corpus_distinct, logprob_summary, rouge_scores, sacrebleu_scores, sample_diversity
from seqlab.metrics import keys as K

HYPS = ["The cat sat on the mat.", "He ran quickly to the houses", "", "God said: let there be light ✨"]
REFS = ["The cat is sitting on the mat.", "He was running to the house.", "Nothing here.",
        "God said, “Let there be light.”\nAnd there was light."]


def test_bleu_and_chrf_equal_sacrebleu():
    ours = sacrebleu_scores(HYPS, REFS)
    assert ours[K.BLEU] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score, abs=1e-9)
    assert ours[K.CHRF] == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score, abs=1e-9)
    assert ours["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")


def test_rouge_equals_rouge_score_with_stemming():
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"], use_stemmer=True)
    direct = [scorer.score(r, h) for h, r in zip(HYPS, REFS, strict=True)]
    ours = rouge_scores(HYPS, REFS)
    for name in ("rouge1", "rouge2", "rougeL", "rougeLsum"):
        assert ours[name] == pytest.approx(100 * sum(d[name].fmeasure for d in direct) / len(direct), abs=1e-9)


def test_rouge_lsum_reads_one_sentence_per_line_like_the_standard_scripts():
    """CNN/DailyMail-shaped: highlights one per line, a generated summary on one line. The summary is split
    into sentences first (as Hugging Face's rouge metric does with nltk), or Lsum would equal ROUGE-L."""
    hyp = "Gamma rays hit. Alpha and beta decay!"
    ref = "Alpha and beta decay gamma rays hit.\nNothing else."
    scorer = rouge_scorer.RougeScorer(["rougeLsum", "rougeL"], use_stemmer=True)
    split = scorer.score(ref, "Gamma rays hit.\nAlpha and beta decay!")
    unsplit = scorer.score(ref, hyp)
    ours = rouge_scores([hyp], [ref])
    assert ours["rougeLsum"] == pytest.approx(100 * split["rougeLsum"].fmeasure)
    assert ours["rougeLsum"] > 100 * unsplit["rougeLsum"].fmeasure  # sentences are matched in any order
    assert ours["rougeL"] == pytest.approx(100 * unsplit["rougeL"].fmeasure)  # ROUGE-L is unchanged


def test_multi_reference_metrics_equal_direct_calls():
    refs2 = ["A cat sits on the mat.", "He runs fast to the house.", "Nothing.", "And God said: light!"]
    ours = sacrebleu_scores(HYPS, [REFS, refs2])
    assert ours[K.BLEU] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS, refs2]).score, abs=1e-9)
    assert ours[K.CHRF] == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS, refs2]).score, abs=1e-9)
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    direct = [scorer.score_multi([a, b], h) for h, a, b in zip(HYPS, REFS, refs2, strict=True)]
    rouge = rouge_scores(HYPS, [REFS, refs2])
    for name in ("rouge1", "rouge2", "rougeL"):
        assert rouge[name] == pytest.approx(100 * sum(d[name].fmeasure for d in direct) / len(direct), abs=1e-9)


def test_distinct_and_self_bleu():
    assert corpus_distinct(["a b a b", "a c"]) == {K.DISTINCT1: 3 / 6, K.DISTINCT2: 3 / 4}
    same = sample_diversity([["a b c d e", "a b c d e"], ["x y z w v", "x y z w v"]])
    assert same[K.SELF_BLEU] == pytest.approx(100.0)
    assert same[K.SAMPLE_DISTINCT1] == pytest.approx(0.5)
    different = sample_diversity([["a b c d e", "v w x y z"], ["x y z w v", "a b c d e"]])
    assert different[K.SELF_BLEU] < 5 and different[K.SAMPLE_DISTINCT1] == pytest.approx(1.0)


def test_logprob_summary():
    out = logprob_summary([[-1.0, -2.0], [-3.0]], "ref")
    assert out[K.REF_TOKEN_LOGPROB] == pytest.approx(-2.0)
    assert out[K.REF_SEQ_LOGPROB] == pytest.approx(-3.0)
    assert out[K.REF_PPL] == pytest.approx(math.exp(2.0))


def test_repetition_counts_hypotheses_with_a_repeated_ngram():
    from seqlab.metrics import repetition

    hyps = ["apache ant ant ant ant tasks", "a b c a b c", "a b c d a b c e", "no repeats here at all", ""]
    # a repeated 3-gram: "ant ant ant" in the first, "a b c" in the second and third (3 of 5);
    # no 4-gram occurs twice in any of them.
    assert repetition(hyps) == {K.REPEATED_3GRAM: 60.0, K.REPEATED_4GRAM: 0.0}
    assert repetition(["x y z w x y z w"])[K.REPEATED_4GRAM] == 100.0


def test_length_buckets_score_each_bucket_as_its_own_corpus():
    """BLEU and chrF of a bucket are sacreBLEU's corpus scores of that bucket's examples alone; shares are
    the % of examples per bucket; an empty bucket has no scores."""
    from sacrebleu.metrics import BLEU, CHRF

    from seqlab.metrics import by_source_length
    from seqlab.metrics import keys as K

    hyps = ["the cat sat on the mat", "a dog ran", "it is raining today", "birds fly south in winter", "yes"]
    refs = ["the cat sat on a mat", "the dog ran", "it rains today", "birds fly south for the winter", "no"]
    lengths = [3, 16, 17, 40, 30]  # buckets: <=16, <=16, 17-32, 33-64, 17-32
    out = by_source_length(hyps, refs, lengths)
    assert [out[K.bucket(K.SHARE, label)] for label, _, _ in K.LENGTH_BUCKETS] == [40.0, 40.0, 20.0, 0.0]
    for label, members in (("src_le16", [0, 1]), ("src_17_32", [2, 4]), ("src_33_64", [3])):
        sub_h, sub_r = [hyps[i] for i in members], [[refs[i] for i in members]]
        assert out[K.bucket(K.BLEU, label)] == BLEU().corpus_score(sub_h, sub_r).score
        assert out[K.bucket(K.CHRF, label)] == CHRF().corpus_score(sub_h, sub_r).score
    assert K.bucket(K.BLEU, "src_gt64") not in out


def test_rouge_leaves_the_log_to_seqlab(caplog):
    """rouge-score logs "Using default tokenizer." through absl for every scorer it builds; a sweep's log
    carries seqlab's lines only."""
    import logging

    from seqlab.metrics import rouge_scores

    with caplog.at_level(logging.INFO):
        rouge_scores(["the cat sat"], ["a cat sat"])
    assert not [r for r in caplog.records if r.name == "absl"]


def test_chrfpp_and_ter_equal_sacrebleu_with_their_signatures():
    refs2 = ["A cat sits on the mat.", "He runs fast to the house.", "Nothing.", "And God said: light!"]
    for refs in ([REFS], [REFS, refs2]):
        ours = sacrebleu_scores(HYPS, refs, (K.CHRFPP, K.TER))
        assert ours[K.CHRFPP] == pytest.approx(sacrebleu.corpus_chrf(HYPS, refs, word_order=2).score, abs=1e-9)
        assert ours[K.TER] == pytest.approx(sacrebleu.corpus_ter(HYPS, refs).score, abs=1e-9)
        assert K.BLEU not in ours and K.LENGTH_RATIO in ours  # BLEU's length ratio whatever is chosen
    assert ours["chrfpp_signature"].startswith("nrefs:2|case:mixed|eff:yes|nc:6|nw:2|space:no")
    assert ours["ter_signature"].startswith("nrefs:2|case:lc|tok:tercom|norm:no|punct:yes|asian:no")


def test_ter_counts_edits_and_shifts_by_hand():
    """TER = (insertions + deletions + substitutions + shifts) / reference words, x100 (Snover et al. 2006)."""
    assert sacrebleu_scores(["a b x d"], ["a b c d"], (K.TER,))[K.TER] == pytest.approx(25.0)  # 1 substitution
    assert sacrebleu_scores(["c d a b"], ["a b c d"], (K.TER,))[K.TER] == pytest.approx(25.0)  # 1 block shift
    assert sacrebleu_scores(["a b"], ["a b c d"], (K.TER,))[K.TER] == pytest.approx(50.0)  # 2 deletions
    assert sacrebleu_scores(["A B C D"], ["a b c d"], (K.TER,))[K.TER] == 0.0  # case-insensitive, as sacreBLEU


def test_metric_choice_is_checked_naming_the_key():
    from seqlab.config import ConfigError
    from seqlab.metrics.text import check_metrics

    assert check_metrics(["ter", "bleu", "ter"]) == ("ter", "bleu")
    with pytest.raises(ConfigError, match=r"eval\.metrics=\['bleu', 'chrf\+\+'\]: unknown \['chrf\+\+'\]"):
        check_metrics(["bleu", "chrf++"])
    with pytest.raises(ConfigError, match="eval.metrics=\\[\\]"):
        check_metrics([])
