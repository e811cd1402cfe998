"""Sentence-level metrics for every (hypothesis, reference) pair at once: the utilities of MBR decoding.

Each matrix equals, entry by entry, the reference implementation called once per pair:
sacreBLEU's `sentence_chrf` (chrF, char order 6, beta 2, whitespace removed), `sentence_bleu`
(13a tokens, exp smoothing, effective order) and rouge-score's F1 of ROUGE-1 / ROUGE-L with
Porter stemming (as the corpus metrics in `metrics.text` use them), all on a 0-100 scale.

Why not call them N x M times: at 32 x 32 candidates that is a thousand Python-level metric
calls per source. The n-gram counts are what cost; they are extracted once per distinct text,
and the clipped match counts of all pairs, sum_g min(h_g, r_g), come from one matrix product per
order: the k-th occurrence of n-gram g is its own 0/1 feature (g, k), and
sum_g min(h_g, r_g) = sum_{g, k} [h_g >= k] [r_g >= k]. The final formulas then run on whole
(N, M) arrays, in the reference's order of operations.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from functools import cache
from typing import Literal

import numpy as np

Utility = Literal["chrf", "bleu", "rouge1", "rougeL"]
ROUGE_UTILITIES = ("rouge1", "rougeL")
CHRF_ORDER, CHRF_BETA = 6, 2  # sacreBLEU's CHRF defaults
BLEU_ORDER = 4


def occurrence_features(counts: Sequence[Counter]) -> np.ndarray:
    """(T, F) 0/1 matrix: column (g, k) is set for a text holding n-gram g at least k times."""
    columns: dict[tuple[object, int], int] = {}
    rows: list[int] = []
    cols: list[int] = []
    for t, counter in enumerate(counts):
        for gram, count in counter.items():
            for k in range(count):
                rows.append(t)
                cols.append(columns.setdefault((gram, k), len(columns)))
    out = np.zeros((len(counts), max(len(columns), 1)), dtype=np.float32)  # float32 sums are exact below 2^24
    out[rows, cols] = 1.0
    return out


def clipped_matches(hyp_counts: Sequence[Counter], ref_counts: Sequence[Counter]) -> np.ndarray:
    """(N, M) sum over n-grams of min(hyp count, ref count), for every pair."""
    feats = occurrence_features([*hyp_counts, *ref_counts])
    n = len(hyp_counts)
    return (feats[:n] @ feats[n:].T).astype(np.float64)


def ngrams(tokens: Sequence[str] | str, n: int) -> Counter:
    return Counter(tuple(tokens[i:i + n]) if not isinstance(tokens, str) else tokens[i:i + n]
                   for i in range(len(tokens) - n + 1))


def chrf_matrix(hyps: Sequence[str], refs: Sequence[str]) -> np.ndarray:
    """sacreBLEU `CHRF().sentence_score(h, [r]).score` for every pair: (N, M)."""
    h_chars = ["".join(h.split()) for h in hyps]
    r_chars = ["".join(r.split()) for r in refs]
    factor = CHRF_BETA**2
    shape = (len(hyps), len(refs))
    avg_prec, avg_rec, effective = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    for n in range(1, CHRF_ORDER + 1):
        n_hyp = np.array([max(len(h) - n + 1, 0) for h in h_chars], dtype=np.float64)[:, None]
        n_ref = np.array([max(len(r) - n + 1, 0) for r in r_chars], dtype=np.float64)[None, :]
        match = clipped_matches([ngrams(h, n) for h in h_chars], [ngrams(r, n) for r in r_chars])
        both = (n_hyp > 0) & (n_ref > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            prec = np.where(n_hyp > 0, match / n_hyp, 1e-16)
            rec = np.where(n_ref > 0, match / n_ref, 1e-16)
        avg_prec = np.where(both, avg_prec + prec, avg_prec)
        avg_rec = np.where(both, avg_rec + rec, avg_rec)
        effective += both
    with np.errstate(divide="ignore", invalid="ignore"):
        avg_prec = np.where(effective > 0, avg_prec / effective, 0.0)
        avg_rec = np.where(effective > 0, avg_rec / effective, 0.0)
        score = (1 + factor) * avg_prec * avg_rec / ((factor * avg_prec) + avg_rec)
        return np.where(avg_prec + avg_rec > 0, 100 * score, 0.0)


@cache
def _bleu_tokenizer() -> Callable[[str], str]:
    from sacrebleu.metrics.bleu import BLEU

    return BLEU(effective_order=True)._preprocess_segment  # 13a tokenization, as sentence_bleu applies it


def bleu_matrix(hyps: Sequence[str], refs: Sequence[str]) -> np.ndarray:
    """sacreBLEU `sentence_bleu(h, [r]).score` for every pair: (N, M)."""
    tokenize = _bleu_tokenizer()
    h_words = [tokenize(h).split() for h in hyps]
    r_words = [tokenize(r).split() for r in refs]
    sys_len = np.array([len(w) for w in h_words], dtype=np.float64)[:, None]  # (N, 1)
    ref_len = np.array([len(w) for w in r_words], dtype=np.float64)[None, :]  # (1, M)
    correct = np.stack([clipped_matches([ngrams(w, n) for w in h_words], [ngrams(w, n) for w in r_words])
                        for n in range(1, BLEU_ORDER + 1)], axis=-1)  # (N, M, 4)
    total = np.stack([np.maximum(sys_len - n + 1, 0) for n in range(1, BLEU_ORDER + 1)], axis=-1)  # (N, 1, 4)
    with np.errstate(divide="ignore", invalid="ignore"):
        bp = np.where(sys_len < ref_len, np.where(sys_len > 0, np.exp(1 - ref_len / sys_len), 0.0), 1.0)
        log_sum = np.zeros(correct.shape[:2])
        smooth = np.ones(correct.shape[:2])
        eff_order = np.minimum(sys_len, BLEU_ORDER)  # orders with a hypothesis n-gram (sacreBLEU stops there)
        for n in range(BLEU_ORDER):
            live = total[..., n] > 0
            zero = correct[..., n] == 0
            smooth = np.where(live & zero, smooth * 2, smooth)
            prec = np.where(zero, 100.0 / (smooth * total[..., n]), 100.0 * correct[..., n] / total[..., n])
            log_sum = np.where(live, log_sum + np.log(np.where(live, prec, 1.0)), log_sum)
        score = bp * np.exp(log_sum / np.maximum(eff_order, 1))
    return np.where(correct.sum(-1) > 0, score, 0.0)  # sacreBLEU: no match at any order -> 0


@cache
def _rouge_tokenizer() -> object:
    from rouge_score.tokenizers import DefaultTokenizer

    return DefaultTokenizer(use_stemmer=True)  # what RougeScorer(..., use_stemmer=True) tokenizes with


def _f1(overlap: np.ndarray, n_pred: np.ndarray, n_target: np.ndarray) -> np.ndarray:
    """rouge-score's P, R and F1 (x100) from overlap counts; (N, M)."""
    precision = overlap / np.maximum(n_pred, 1)
    recall = overlap / np.maximum(n_target, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = 2 * precision * recall / (precision + recall)
    return 100.0 * np.where(precision + recall > 0, f, 0.0)


def rouge1_matrix(hyps: Sequence[str], refs: Sequence[str]) -> np.ndarray:
    """rouge-score `RougeScorer(["rouge1"], use_stemmer=True).score(r, h).fmeasure * 100`: (N, M)."""
    tok = _rouge_tokenizer()
    h_tokens = [tok.tokenize(h) for h in hyps]  # type: ignore[attr-defined]
    r_tokens = [tok.tokenize(r) for r in refs]  # type: ignore[attr-defined]
    overlap = clipped_matches([Counter(t) for t in h_tokens], [Counter(t) for t in r_tokens])
    n_pred = np.array([len(t) for t in h_tokens], dtype=np.float64)[:, None]
    n_target = np.array([len(t) for t in r_tokens], dtype=np.float64)[None, :]
    return _f1(overlap, n_pred, n_target)


def lcs_lengths(hyps: Sequence[Sequence[int]], refs: Sequence[Sequence[int]]) -> np.ndarray:
    """(N, M) longest common subsequence of every pair, one dynamic programme over all pairs at once."""
    n, m = len(hyps), len(refs)
    lh, lr = max((len(h) for h in hyps), default=0), max((len(r) for r in refs), default=0)
    h = np.full((n, max(lh, 1)), -1, dtype=np.int64)  # -1 / -2 padding never matches
    r = np.full((m, max(lr, 1)), -2, dtype=np.int64)
    for i, seq in enumerate(hyps):
        h[i, : len(seq)] = seq
    for j, seq in enumerate(refs):
        r[j, : len(seq)] = seq
    h_len = np.array([len(s) for s in hyps])
    r_len = np.array([len(s) for s in refs])
    out = np.zeros((n, m), dtype=np.int64)
    prev = np.zeros((n, m, lr + 1), dtype=np.int64)  # row i - 1 of every pair's table
    for i in range(1, lh + 1):
        row = np.zeros_like(prev)
        eq = h[:, i - 1, None, None] == r[None, :, :]  # (N, M, Lr)
        for j in range(1, lr + 1):
            row[:, :, j] = np.where(eq[:, :, j - 1], prev[:, :, j - 1] + 1, np.maximum(prev[:, :, j], row[:, :, j - 1]))
        done = h_len == i
        if done.any():
            out[done] = np.take_along_axis(row[done], np.broadcast_to(r_len[None, :, None], (int(done.sum()), m, 1)),
                                           axis=2)[..., 0]
        prev = row
    return out


def rougeL_matrix(hyps: Sequence[str], refs: Sequence[str]) -> np.ndarray:
    """rouge-score `RougeScorer(["rougeL"], use_stemmer=True).score(r, h).fmeasure * 100`: (N, M)."""
    tok = _rouge_tokenizer()
    h_tokens = [tok.tokenize(h) for h in hyps]  # type: ignore[attr-defined]
    r_tokens = [tok.tokenize(r) for r in refs]  # type: ignore[attr-defined]
    vocab: dict[str, int] = {}
    h_ids = [[vocab.setdefault(w, len(vocab)) for w in t] for t in h_tokens]
    r_ids = [[vocab.setdefault(w, len(vocab)) for w in t] for t in r_tokens]
    lcs = lcs_lengths(h_ids, r_ids).astype(np.float64)
    n_pred = np.array([len(t) for t in h_tokens], dtype=np.float64)[:, None]
    n_target = np.array([len(t) for t in r_tokens], dtype=np.float64)[None, :]
    return _f1(lcs, n_pred, n_target)  # empty on either side: lcs = 0 -> 0, as rouge-score


UTILITIES: dict[str, Callable[[Sequence[str], Sequence[str]], np.ndarray]] = {
    "chrf": chrf_matrix, "bleu": bleu_matrix, "rouge1": rouge1_matrix, "rougeL": rougeL_matrix,
}


def utility_matrix(utility: str, hyps: Sequence[str], refs: Sequence[str]) -> np.ndarray:
    """(N, M) utility of hypothesis i measured against reference j (0-100)."""
    return UTILITIES[utility](hyps, refs)
