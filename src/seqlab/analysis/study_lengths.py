"""BLEU and chrF by source length, and whether a variant's difference from its reference holds on each length.

Every evaluation scores each source-length bucket (seqlab.metrics.keys.LENGTH_BUCKETS, subword tokens), so
a question's records alone give the per-bucket means. Whether a difference on a bucket is more than noise
needs the sentences: the archive's `test.source_tokens.txt.gz` says which bucket each test sentence falls in,
and each seed's paired bootstrap is run on that bucket's sentences alone. A bucket's difference is judged
by the study's own rule (seqlab.analysis.study_claims.verdict): established when every seed's test gives
p < 0.05 in the direction of the mean and the mean exceeds twice the pooled seed sd. The longest bucket
is the smallest in most test sets, so its differences need to be large to count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from seqlab.analysis.study import (
    SOURCE_TOKENS,
    Record,
    Runs,
)
from seqlab.analysis.study_claims import verdict
from seqlab.metrics import declarations as M
from seqlab.metrics import keys as K
from seqlab.metrics.seeds import compare as compare_seeds
from seqlab.metrics.seeds import summarize
from seqlab.metrics.significance import sacrebleu_paired
from seqlab.metrics.text import by_source_length, length_buckets

LABELS = tuple(label for label, _, _ in K.LENGTH_BUCKETS)
TOLERANCE = 1e-6  # BLEU and chrF recomputed from the archive against the records' own


def has_buckets(record: Record) -> bool:
    return K.bucket(K.SHARE, LABELS[0]) in record.metrics


def length_table(by_variant: dict[str, list[Record]], metric: str = K.BLEU) -> tuple[str, dict[str, Any]]:
    """`metric` (BLEU or chrF) per source-length bucket, mean +- sd over seeds, with each bucket's share of
    the test set; empty when the records predate the buckets."""
    first = next((rs[0] for rs in by_variant.values() if rs), None)
    if first is None or not has_buckets(first):
        return "", {}
    shares = " | ".join(f"{K.bucket_title(b)} ({first.metrics[K.bucket(K.SHARE, b)]:.0f}%)" for b in LABELS)
    title = M.bucketed()[metric]
    lines = [f"{title} by source length in subword tokens (share of the test set), mean ± sd over seeds", "",
             f"| variant | {shares} |", "|---" * (len(LABELS) + 1) + "|"]
    data: dict[str, Any] = {}
    for v, rs in by_variant.items():
        if not all(has_buckets(r) for r in rs):
            continue
        cells, data[v] = [], {}
        for b in LABELS:
            values = {r.seed: r.metrics[K.bucket(metric, b)] for r in rs if K.bucket(metric, b) in r.metrics}
            if not values:
                cells.append("–")
                continue
            s = summarize(values)
            cells.append(f"{s.mean:.2f} ± {s.sd:.2f}")
            data[v][b] = s.to_dict()
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    return "\n".join(lines), data


def check_lengths(records: Sequence[Record], refs: Sequence[str], lengths: Sequence[int], where: str) -> None:
    """Fail unless `lengths` put each record's hypotheses into the buckets its evaluation scored: every
    bucket's share, BLEU and chrF recomputed from the archive equal the record's. `where` names the file."""
    if len(lengths) != len(refs):
        raise ValueError(f"{where}: {len(lengths)} source lengths for {len(refs)} test references; the file "
                         "belongs to another test set")
    for r in records:
        if not has_buckets(r):
            continue
        again = by_source_length(r.hypotheses, list(refs), list(lengths))
        wrong = [k for k, v in r.metrics.items() if k in again and not math.isclose(v, again[k], abs_tol=TOLERANCE)]
        if wrong:
            raise ValueError(f"{where}: {r.name}.{r.label}'s {wrong[0]} is {r.metrics[wrong[0]]:.6f}, but "
                             f"{again[wrong[0]]:.6f} with these source lengths; they are not the lengths its "
                             "evaluation counted")


def bucket_comparison(ref: str, other: str, common: list[int], runs: Runs, refs: Sequence[str],
                      buckets: dict[str, list[int]]) -> dict[str, dict[str, Any]]:
    """label -> `other` against `ref` on that bucket's sentences (`buckets`: each label's test indices): the
    seed-level comparison of the bucket's BLEU, each seed's paired bootstrap on the bucket (sacreBLEU's, BLEU
    only) and the study's verdict."""
    out: dict[str, dict[str, Any]] = {}
    for label, idx in buckets.items():
        if not idx:
            continue
        bucket_refs = [[refs[i] for i in idx]]
        tests = []
        for s in common:
            pair = [(f"{v}-seed{s}", [runs[(v, s)].hypotheses[i] for i in idx]) for v in (ref, other)]
            c = sacrebleu_paired(pair, bucket_refs, n_ar=0, metrics=(K.BLEU,))[1][0]
            tests.append({"seed": s, "metric": K.BLEU, "delta": c.delta, "p_bootstrap": c.p_bootstrap})
        key = K.bucket(K.BLEU, label)
        bleu = compare_seeds(summarize({s: runs[(ref, s)].metrics[key] for s in common}),
                             summarize({s: runs[(other, s)].metrics[key] for s in common}))
        entry = {"seeds": common, "n_sentences": len(idx), "bleu": bleu.to_dict(), "tests": tests}
        out[label] = {**entry, "verdict": verdict(entry)}
    return out


def bucket_cell(c: dict[str, Any]) -> str:
    """"+1.64 (better; p 0.001, 0.004, 0.010)": Δ BLEU, its verdict and each seed's p."""
    p = ", ".join(f"{t['p_bootstrap']:.3f}" for t in c["tests"])
    return f"{c['bleu']['delta']:+.2f} ({c['verdict']}; p {p})"


def bucket_comparisons_table(pairs: Sequence[tuple[str, str]], runs: Runs, refs: Sequence[str],
                             lengths: Sequence[int]) -> tuple[str, list[dict[str, Any]]]:
    """Δ BLEU of each comparison on each bucket, with its verdict and each seed's paired bootstrap p."""
    buckets = length_buckets(lengths)
    lines = ["Δ BLEU by source length (mean over seeds; verdict by the study's rule; each seed's paired "
             "bootstrap p on the bucket's sentences)", "",
             "| comparison | " + " | ".join(f"{K.bucket_title(b)} ({len(buckets[b])} sentences)"
                                           for b in LABELS) + " |",
             "|---" * (len(LABELS) + 1) + "|"]
    data = []
    for ref, other in pairs:
        common = sorted({s for v, s in runs if v == ref} & {s for v, s in runs if v == other})
        if not common or not all(has_buckets(runs[(v, s)]) for v in (ref, other) for s in common):
            continue
        by_bucket = bucket_comparison(ref, other, common, runs, refs, buckets)
        cells = [bucket_cell(by_bucket[b]) if b in by_bucket else "–" for b in LABELS]
        lines.append(f"| {other} − {ref} | " + " | ".join(cells) + " |")
        data.append({"reference": ref, "variant": other, "buckets": by_bucket})
    return ("\n".join(lines), data) if data else ("", [])


def length_section(by_variant: dict[str, list[Record]], pairs: Sequence[tuple[str, str]], runs: Runs,
                   refs: Sequence[str], lengths: Sequence[int] | None) -> tuple[str, dict[str, Any]]:
    """What a length question's table adds: BLEU and chrF per bucket, and (with the archive's source lengths,
    checked against every record first) each comparison per bucket."""
    parts, data = [], {}
    for metric in M.bucketed():
        table, numbers = length_table(by_variant, metric)
        if table:
            parts.append(table)
            data[metric] = numbers
    if parts and lengths is not None:
        check_lengths([r for rs in by_variant.values() for r in rs], refs, lengths, f"the archive's {SOURCE_TOKENS}")
        table, comparisons = bucket_comparisons_table(pairs, runs, refs, lengths)
        if table:
            parts.append(table)
            data["comparisons"] = comparisons
    return "\n\n".join(parts), data
