"""Text metrics by the reference implementations: sacreBLEU (BLEU, chrF) and rouge-score.

All take detokenized strings. ROUGE uses rouge-score's default tokenizer with
Porter stemming; for ROUGE-Lsum, sentences are split on newlines, which is what
rouge-score does (it does not split sentences itself): put one sentence per line
in hypotheses and references (CNN/DailyMail highlights already are) or Lsum
equals ROUGE-L.
"""

from __future__ import annotations

from collections.abc import Sequence

from seqlab.metrics import keys as K


def sacrebleu_scores(hyps: Sequence[str], refs: Sequence[str]) -> dict[str, float | str]:
    """Corpus BLEU and chrF with sacreBLEU's defaults, plus their signatures and length statistics."""
    from sacrebleu.metrics import BLEU, CHRF

    bleu, chrf = BLEU(), CHRF()
    b = bleu.corpus_score(list(hyps), [list(refs)])
    c = chrf.corpus_score(list(hyps), [list(refs)])
    return {
        K.BLEU: b.score, K.CHRF: c.score, K.LENGTH_RATIO: b.sys_len / max(b.ref_len, 1),
        "bleu_signature": str(bleu.get_signature()), "chrf_signature": str(chrf.get_signature()),
    }


def rouge_scores(hyps: Sequence[str], refs: Sequence[str]) -> dict[str, float]:
    """Mean F1 (x100) of ROUGE-1/2/L/Lsum over the corpus, with stemming."""
    from rouge_score import rouge_scorer

    names = [K.ROUGE1, K.ROUGE2, K.ROUGEL, K.ROUGELSUM]
    scorer = rouge_scorer.RougeScorer(names, use_stemmer=True)
    totals = dict.fromkeys(names, 0.0)
    for hyp, ref in zip(hyps, refs, strict=True):
        scores = scorer.score(ref, hyp)  # rouge-score's order: (target, prediction)
        for name in names:
            totals[name] += scores[name].fmeasure
    n = max(len(hyps), 1)
    return {name: 100.0 * total / n for name, total in totals.items()}
