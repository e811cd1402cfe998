"""Text metrics by the reference implementations: sacreBLEU (BLEU, chrF, chrF++, TER) and rouge-score.

Which are computed is a choice (`metrics=[bleu, chrf, chrfpp, ter, rouge]`, metrics.declarations); BLEU, chrF
and ROUGE by default. chrF++ and TER are sacreBLEU's with its defaults, reported with their signatures.

All take detokenized strings and a list of reference streams (one list of strings per
reference; several streams = several references per example, as sacreBLEU takes them).
ROUGE uses rouge-score's default tokenizer with Porter stemming and, with several
references, the best reference per example (rouge-score's `score_multi`). ROUGE-Lsum
is summary-level LCS over sentences, which rouge-score reads as lines; it does not
split sentences itself. As the standard evaluation scripts do (Hugging Face's rouge
metric for CNN/DailyMail: one sentence per line), a text without newlines is split
into sentences first, at '.', '!' or '?' followed by white space; text that already
has one sentence per line (CNN/DailyMail highlights) is kept as it is.
"""

from __future__ import annotations

from collections.abc import Sequence

from seqlab.config import ConfigError
from seqlab.metrics import declarations as M
from seqlab.metrics import keys as K
from seqlab.metrics.rouge import streams
from seqlab.metrics.significance import (
    N_BOOTSTRAP,
    SACREBLEU_DEFAULT_SEED,
    Interval,
    mean_interval,
    resample_indices,
    sacrebleu_interval,
    sacrebleu_metric,
)


def check_metrics(chosen: Sequence[str], key: str = "eval.metrics") -> tuple[str, ...]:
    """The chosen metric names as a tuple, or a ConfigError naming `key` and the choices
    (metrics.declarations)."""
    names = [chosen] if isinstance(chosen, str) else list(chosen)
    unknown = [m for m in names if m not in M.choices()]
    if unknown or not names:
        raise ConfigError(f"{key}={names}: {f'unknown {unknown}; ' if unknown else ''}choose one or more of "
                          f"{list(M.choices())} (rouge = ROUGE-1/2/L/Lsum; {', '.join(M.neural())} read a model: "
                          "neural.*)")
    return tuple(dict.fromkeys(names))


def sacrebleu_scores(hyps: Sequence[str], refs: Sequence[str] | Sequence[Sequence[str]],
                     metrics: Sequence[str] = (K.BLEU, K.CHRF)) -> dict[str, float | str]:
    """Corpus scores of `metrics` (sacreBLEU's: bleu, chrf, chrfpp, ter) with sacreBLEU's defaults, each with its
    signature (`<name>_signature`), and BLEU's length ratio (hypothesis / reference tokens) whatever is chosen."""
    ref_streams = streams(refs)
    out: dict[str, float | str] = {}
    for name in dict.fromkeys([*M.of_kind("sacrebleu", metrics), K.BLEU]):  # BLEU: the ratio
        metric = sacrebleu_metric(name)
        result = metric.corpus_score(list(hyps), ref_streams)
        if name in metrics:
            out[name], out[f"{name}_signature"] = result.score, str(metric.get_signature())
        if name == K.BLEU:
            out[K.LENGTH_RATIO] = result.sys_len / max(result.ref_len, 1)
    return out


def length_buckets(source_tokens: Sequence[int]) -> dict[str, list[int]]:
    """label -> the indices of the examples whose source falls in that bucket (K.LENGTH_BUCKETS)."""
    return {label: [i for i, n in enumerate(source_tokens) if n >= low and (high is None or n <= high)]
            for label, low, high in K.LENGTH_BUCKETS}


def by_source_length(hyps: Sequence[str], refs: Sequence[str] | Sequence[Sequence[str]],
                     source_tokens: Sequence[int], metrics: Sequence[str] | None = None) -> dict[str, float]:
    """Corpus BLEU and chrF (those of them chosen in `metrics`) on each source-length bucket (K.LENGTH_BUCKETS,
    subword tokens), and each bucket's share of the examples in %: whether a model holds up on the long
    sentences that training saw least. An empty bucket has its share (0) and no scores."""
    ref_streams = streams(refs)
    bucketed = [m for m in M.bucketed() if m in M.chosen_or_default(metrics)]
    out: dict[str, float] = {}
    for label, idx in length_buckets(source_tokens).items():
        out[K.bucket(K.SHARE, label)] = 100.0 * len(idx) / max(len(hyps), 1)
        if idx and bucketed:
            scores = sacrebleu_scores([hyps[i] for i in idx], [[stream[i] for i in idx] for stream in ref_streams],
                                      bucketed)
            out.update({K.bucket(m, label): float(scores[m]) for m in bucketed})
    return out


def segment_means(hyps: Sequence[str], refs: Sequence[str] | Sequence[Sequence[str]],
                  metrics: Sequence[str] | None = None) -> dict[str, float]:
    """The corpus scores of the chosen metrics that are means of per-segment scores (ROUGE-1/2/L/Lsum with
    `rouge` chosen; metrics.declarations kind `segments`)."""
    keys = M.computed_by(metrics)
    n = max(len(hyps), 1)
    return {name: sum(values) / n for name, values in M.segment_scores(hyps, streams(refs), keys).items()}


def intervals(hyps: Sequence[str], refs: Sequence[str] | Sequence[Sequence[str]],
              seed: int = SACREBLEU_DEFAULT_SEED, n: int = N_BOOTSTRAP,
              metrics: Sequence[str] | None = None) -> dict[str, Interval]:
    """95% bootstrap intervals, seeded, of the chosen sacreBLEU metrics (sacreBLEU's) and of the chosen
    segment-mean metrics that are tested (ROUGE-1/2/L with `rouge` chosen: resampled examples)."""
    ref_streams = streams(refs)
    keys = M.computed_by(metrics)
    out = {m: sacrebleu_interval(m, hyps, ref_streams, seed, n) for m in M.of_kind("sacrebleu", keys)}
    means = [m for m in M.of_kind("segments", keys) if m in M.comparable()]
    if means:
        idx = resample_indices(len(hyps), seed, n)
        per_example = M.segment_scores(hyps, ref_streams, means)
        out.update({m: mean_interval(per_example[m], idx) for m in means})
    return out
