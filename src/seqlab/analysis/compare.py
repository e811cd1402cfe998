"""Paired significance between systems: `seqlab compare BASE_RESULT OTHER_RESULT ... [--json PATH]`.

Systems are evaluation result folders (each with hypotheses.jsonl, as `make eval`
writes them), the first being the baseline, or archived evaluation records (a pipeline's
`results/<experiment>/<stage>.json`, read with the outputs archived beside it); or plain-text
files for outputs seqlab did not produce: `--refs REF.txt [--refs REF2.txt] --hyps BASE.txt OTHER.txt ...` (one
segment per line; several `--refs` are several references).

For every system and metric: the score and its 95% bootstrap interval; for every
system against the baseline: the difference, the paired bootstrap p-value (1,000
resamples) and, for BLEU and chrF, the approximate randomization p-value (10,000
trials), all from sacreBLEU's `PairedTest`; ROUGE by paired bootstrap over examples
(seqlab.metrics.significance). Runs that differ only in their training seed are also
aggregated (mean +- sd over seeds, seqlab.metrics.seeds); each is then compared with
the baseline variant's run of the same seed. `--by-length` repeats BLEU's and chrF's paired
bootstrap on each source-length bucket's segments alone (result folders record each source's
subword tokens), to show where a difference comes from.
"""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from seqlab.metrics import declarations as M
from seqlab.metrics import keys as K
from seqlab.metrics.seeds import SeedComparison, SeedSummary, summarize
from seqlab.metrics.seeds import compare as compare_seeds
from seqlab.metrics.significance import (
    N_AR,
    N_BOOTSTRAP,
    SACREBLEU_DEFAULT_SEED,
    Comparison,
    Interval,
    mean_interval,
    paired_ar_p,
    paired_bootstrap_p,
    resample_indices,
    sacrebleu_paired,
)
from seqlab.metrics.text import length_buckets
from seqlab.tracking.results import (
    HYPOTHESES_FILE,
    METRICS_FILE,
    segment_scores_of,
    source_tokens_of,
    variant_of,
)

log = logging.getLogger(__name__)


class CompareError(ValueError):
    """Inputs that cannot be compared; the message names them."""


@dataclass
class System:
    """One system's outputs on one test set, and where they came from."""

    name: str
    hypotheses: list[str]
    references: list[list[str]]  # reference streams
    sources: list[str] | None = None
    origin: str = ""
    variant: str | None = None  # what identifies the system apart from its training seed
    seed: int | None = None
    group_label: str | None = None  # the variant's name when its seeds are aggregated
    source_tokens: list[int] | None = None  # each source's subword tokens as decoded (result folders)
    segment_scores: dict[str, list[float]] = field(default_factory=dict)  # neural metric -> per-segment scores


@dataclass
class Report:
    intervals: dict[str, dict[str, Interval]] = field(default_factory=dict)
    comparisons: list[Comparison] = field(default_factory=list)
    seed_groups: dict[str, dict[str, SeedSummary]] = field(default_factory=dict)
    seed_comparisons: list[tuple[str, str, str, SeedComparison]] = field(default_factory=list)
    by_length: dict[str, list[Comparison]] = field(default_factory=dict)  # bucket label -> its comparisons
    bucket_sizes: dict[str, int] = field(default_factory=dict)

    def to_dict(self, systems: Sequence[System]) -> dict[str, Any]:
        return {
            "systems": [{"name": s.name, "n": len(s.hypotheses), "origin": s.origin, "variant": s.variant,
                         "seed": s.seed, "metrics": {m: iv.to_dict() for m, iv in self.intervals[s.name].items()}}
                        for s in systems],
            "comparisons": [{"base": c.base, "system": c.system, "metric": c.metric, "delta": c.delta,
                             "p_bootstrap": c.p_bootstrap, "p_ar": c.p_ar} for c in self.comparisons],
            "seed_groups": [{"variant": v, "metrics": {m: s.to_dict() for m, s in ms.items()}}
                            for v, ms in self.seed_groups.items()],
            "seed_comparisons": [{"base": a, "system": b, "metric": m, **c.to_dict()}
                                 for a, b, m, c in self.seed_comparisons],
            "by_length": {label: {"n": self.bucket_sizes[label],
                                  "comparisons": [{"base": c.base, "system": c.system, "metric": c.metric,
                                                   "delta": c.delta, "p_bootstrap": c.p_bootstrap} for c in cs]}
                          for label, cs in self.by_length.items()},
        }


def read_lines(path: Path) -> list[str]:
    """A file's lines; a `.gz` file decompressed (the archive's outputs)."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        return raw.decode("utf-8").rstrip("\n").split("\n")
    except OSError as err:
        raise CompareError(f"{path}: cannot read ({err.strerror})") from None
    except (gzip.BadGzipFile, EOFError) as err:
        raise CompareError(f"{path}: not a complete gzip file ({err})") from None
    except UnicodeDecodeError as err:
        raise CompareError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None


def from_text_files(refs: Sequence[Path], hyps: Sequence[Path]) -> list[System]:
    streams = [read_lines(p) for p in refs]
    for path, stream in zip(refs[1:], streams[1:], strict=True):
        if len(stream) != len(streams[0]):
            raise CompareError(f"references {refs[0]} ({len(streams[0])} lines) and {path} ({len(stream)} lines) "
                               "differ in length; every reference file needs one line per segment")
    return [System(p.name if sum(q.name == p.name for q in hyps) == 1 else str(p), read_lines(p), streams,
                   origin=str(p)) for p in hyps]


def from_result(path: Path) -> System:
    """An evaluation result folder, or an archived evaluation record (`results/<experiment>/<stage>.json`)."""
    return from_archived(path) if path.is_file() and path.suffix == ".json" else from_result_dir(path)


def from_archived(path: Path) -> System:
    """An archived evaluation: the record's first hypothesis per test sentence and its references, in the files
    archived beside it (what a reader recomputes a reported score from). It keeps no sources: the references
    say whether two systems translated one test set."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        outputs = record["result"]["outputs"]
        hypotheses = read_lines(path.parent / outputs["hypotheses"])
        references = [read_lines(path.parent / name) for name in outputs["references"]]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise CompareError(f"{path}: not an archived evaluation record with its outputs ({err!r}); pass an "
                           "evaluation's record from results/") from None
    return System(f"{path.parent.name}/{record.get('stage', path.stem)}", hypotheses, references,
                  origin=str(path), source_tokens=None)


def distinct_names(systems: Sequence[System]) -> list[System]:
    """Systems whose names repeat (two settings of one checkpoint and decoding: two prompts, two metric models)
    told apart by their folder's own name, which keys the setting; the same folder twice stays a repeat."""
    names = [s.name for s in systems]
    return [replace(s, name=f"{s.name} ({Path(s.origin).name})") if names.count(s.name) > 1 else s for s in systems]


def from_result_dir(path: Path) -> System:
    hyp_file = path / HYPOTHESES_FILE
    if not hyp_file.is_file():
        raise CompareError(f"{path}: no {HYPOTHESES_FILE}; pass an evaluation result folder (made by `make eval`)")
    records = []
    for n, line in enumerate(hyp_file.read_text(encoding="utf-8").splitlines(), 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise CompareError(f"{hyp_file}:{n}: not valid JSON ({err.msg})") from None
    try:
        payload = json.loads((path / METRICS_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        payload = {}
    ckpt = payload.get("checkpoint", {})
    refs = [r.get("references") or [r["reference"]] for r in records]
    n_refs = {len(r) for r in refs}
    if len(n_refs) > 1:
        raise CompareError(f"{hyp_file}: examples have different numbers of references ({sorted(n_refs)})")
    streams = [[r[i] for r in refs] for i in range(n_refs.pop() if n_refs else 1)]
    name = f"{path.parent.name}/{payload.get('label') or path.name}"
    return System(name, [r["hypothesis"] for r in records], streams, [r["source"] for r in records], str(path),
                  variant_of(payload) if payload else None, ckpt.get("seed"),
                  f"{ckpt.get('run_name')}/{payload.get('label')}" if payload else None,
                  source_tokens_of(records), segment_scores_of(records))


def recorded_neural(systems: Sequence[System]) -> tuple[str, ...]:
    """The neural metrics every system recorded segment scores of (what compare adds to its default)."""
    return tuple(m for m in M.neural() if all(m in s.segment_scores for s in systems))


def check_neural(systems: Sequence[System], metrics: Sequence[str]) -> None:
    """A chosen neural metric needs every system's segment scores (seqlab compare does not run the models)."""
    for metric in M.of_kind("neural", metrics):
        missing = [s.origin for s in systems if metric not in s.segment_scores]
        if missing:
            raise CompareError(f"{missing[0]}: has no {metric} segment scores; evaluate it with "
                               f"metrics=[..., {metric}] (plain-text systems cannot be scored by a model here)")


def check_comparable(base: System, other: System) -> None:
    """Same number of segments, same sources and references, or a message naming both inputs."""
    if len(other.hypotheses) != len(base.hypotheses):
        raise CompareError(f"{other.origin} has {len(other.hypotheses)} segments but {base.origin} has "
                           f"{len(base.hypotheses)}: systems must be outputs for the same test set")
    if base.sources is not None and other.sources is not None and base.sources != other.sources:
        line = next(i for i, (a, b) in enumerate(zip(base.sources, other.sources, strict=True)) if a != b) + 1
        raise CompareError(f"{other.origin} and {base.origin} translate different sources (first at segment "
                           f"{line}): compare outputs for the same test set")
    if base.references != other.references:
        raise CompareError(f"{other.origin} and {base.origin} are scored against different references: "
                           "compare outputs for the same test set and references")


def compare(systems: Sequence[System], seed: int = SACREBLEU_DEFAULT_SEED, n_bootstrap: int = N_BOOTSTRAP,
            n_ar: int = N_AR, metrics: Sequence[str] | None = None) -> Report:
    """Intervals for every system; paired tests against the baseline (the same seed's, when seeds vary).
    `metrics`: the declared comparable metrics to test (default: metrics.declarations.default_compared; only
    some where only some are read: ROUGE's scoring is the slowest part); n_ar=0 leaves out the approximate
    randomization test."""
    metrics = M.default_compared() if metrics is None else metrics
    unknown = [m for m in metrics if m not in M.comparable()]
    if unknown:
        raise CompareError(f"metrics {unknown}: choose from {list(M.comparable())}")
    if not systems:
        raise CompareError("nothing to compare: give at least one system")
    if seed <= 0:
        raise CompareError(f"seed={seed}: sacreBLEU treats 0 as 'unseeded'; use a positive seed")
    names = [s.name for s in systems]
    if len(set(names)) != len(names):
        raise CompareError(f"two systems have the same name: {names}")
    for other in systems[1:]:
        check_comparable(systems[0], other)
    check_neural(systems, metrics)
    report = Report()
    refs = systems[0].references
    idx = resample_indices(len(systems[0].hypotheses), seed, n_bootstrap)
    by_sacrebleu = M.of_kind("sacrebleu", metrics)
    by_segments, by_model = M.of_kind("segments", metrics), M.of_kind("neural", metrics)
    by_mean = (*by_segments, *by_model)  # means of per-segment scores
    # system -> metric -> its per-segment scores: computed here (ROUGE's), or as a model recorded them
    per_segment = {s.name: {**(M.segment_scores(s.hypotheses, refs, by_segments) if by_segments else {}),
                            **{m: s.segment_scores[m] for m in by_model}} for s in systems}
    for base, group in baseline_groups(systems):
        intervals, comparisons = sacrebleu_paired([(s.name, s.hypotheses) for s in [base, *group]], refs, seed,
                                                  n_bootstrap, n_ar, by_sacrebleu) if by_sacrebleu else ({}, [])
        for name, by_metric in intervals.items():
            report.intervals.setdefault(name, {}).update(by_metric)
        report.comparisons += comparisons
        for s in [base, *group]:
            report.intervals.setdefault(s.name, {}).update(
                {m: mean_interval(per_segment[s.name][m], idx) for m in by_mean})
        report.comparisons += [
            Comparison(base.name, s.name, m, report.intervals[s.name][m].score - report.intervals[base.name][m].score,
                       paired_bootstrap_p(per_segment[base.name][m], per_segment[s.name][m], idx),
                       paired_ar_p(per_segment[base.name][m], per_segment[s.name][m], seed, n_ar)
                       if m in by_model and n_ar else None)
            for s in group for m in by_mean]
    add_seed_aggregates(report, systems, metrics)
    return report


def add_by_length(report: Report, systems: Sequence[System], seed: int = SACREBLEU_DEFAULT_SEED,
                  n_bootstrap: int = N_BOOTSTRAP) -> None:
    """BLEU's and chrF's paired bootstrap against the baseline on each source-length bucket's segments
    alone (no randomization test: the buckets are for locating a difference, not for a second verdict)."""
    lengths = systems[0].source_tokens
    missing = [s.origin for s in systems if s.source_tokens is None]
    if missing:
        raise CompareError(f"--by-length needs each segment's source length: {missing[0]} has none (plain-text "
                           "files, or a result folder evaluated before they were recorded)")
    differ = [s.origin for s in systems if s.source_tokens != lengths]
    if differ:
        raise CompareError(f"{differ[0]} and {systems[0].origin} count their sources' subword tokens differently "
                           "(another tokenizer or max_positions); --by-length needs the same buckets")
    for label, idx in length_buckets(lengths).items():
        report.bucket_sizes[label] = len(idx)
        if not idx:
            continue
        refs = [[stream[i] for i in idx] for stream in systems[0].references]
        for base, group in baseline_groups(systems):
            pairs = [(s.name, [s.hypotheses[i] for i in idx]) for s in [base, *group]]
            report.by_length.setdefault(label, []).extend(
                sacrebleu_paired(pairs, refs, seed, n_bootstrap, 0, M.of_kind("sacrebleu"))[1])


def length_lines(report: Report) -> list[str]:
    """The --by-length part of the table: per bucket and metric, each system's delta and p(bs)."""
    lines = ["", "by source length (subword tokens): delta against the baseline, p(bs) on the bucket's segments"]
    for label, comparisons in report.by_length.items():
        lines.append(f"{K.bucket_title(label)} ({report.bucket_sizes[label]} segments)")
        lines += [f"  {c.metric:6} {c.system}  {c.delta:+7.2f}  p(bs) {c.p_bootstrap:.4f}" for c in comparisons]
    return lines


def baseline_groups(systems: Sequence[System]) -> list[tuple[System, list[System]]]:
    """(baseline, systems compared with it): the first system, or per seed the baseline variant's run."""
    first = systems[0]
    base_by_seed = {s.seed: s for s in systems if s.variant is not None and s.variant == first.variant}
    if first.variant is None or len(base_by_seed) < 2:
        return [(first, list(systems[1:]))]
    groups: dict[str, tuple[System, list[System]]] = {}
    for s in systems:
        base = base_by_seed.get(s.seed, first)
        entry = groups.setdefault(base.name, (base, []))
        if s is not base:
            entry[1].append(s)
    return list(groups.values())


def add_seed_aggregates(report: Report, systems: Sequence[System], metrics: Sequence[str]) -> None:
    """Mean +- sd over seeds for every variant run with several seeds, and each variant against the first."""
    by_variant: dict[str, list[System]] = {}
    for s in systems:
        if s.variant is not None and s.seed is not None:
            by_variant.setdefault(s.variant, []).append(s)
    if not any(len(group) > 1 for group in by_variant.values()):
        return
    labels: dict[str, str] = {}
    for variant, group in by_variant.items():
        label = group[0].group_label or group[0].name
        labels[variant] = label if label not in labels.values() else f"{label}#{len(labels)}"
    for variant, group in by_variant.items():
        report.seed_groups[labels[variant]] = {
            m: summarize({s.seed: report.intervals[s.name][m].score for s in group}) for m in metrics}
    base_label = labels.get(systems[0].variant or "")
    if base_label is None:
        return
    for label, summaries in report.seed_groups.items():
        if label != base_label:
            report.seed_comparisons += [(base_label, label, m, compare_seeds(report.seed_groups[base_label][m],
                                                                             summaries[m])) for m in metrics]


def significance_table(report: Report, systems: Sequence[System], alpha: float = 0.05) -> str:
    """A readable table: per metric, each system's score, CI, delta and p-values (* = p < alpha for both)."""
    found = {(c.system, c.metric): c for c in report.comparisons}
    width = max(len(s.name) for s in systems)
    lines = [f"{'metric':8} {'system':{width}} {'score':>7} {'95% CI':>17} {'delta':>7} {'p(bs)':>7} {'p(ar)':>7}"]
    shown = [m for m in M.comparable() if m in report.intervals[systems[0].name]]
    for metric in shown:
        for s in systems:
            iv = report.intervals[s.name][metric]
            row = f"{metric:8} {s.name:{width}} {iv.score:7.2f} [{iv.low:6.2f}, {iv.high:6.2f}]"
            c = found.get((s.name, metric))
            if c is not None:
                p_ar = f"{c.p_ar:7.4f}" if c.p_ar is not None else f"{'-':>7}"
                row += f" {c.delta:+7.2f} {c.p_bootstrap:7.4f} {p_ar}" + (" *" if c.significant(alpha) else "")
            lines.append(row)
        lines.append("")
    lines.append(f"* p < {alpha} (paired bootstrap, and approximate randomization where given)")
    lines += [f"{m}: lower is better (a negative delta is an improvement)" for m in shown if M.lower_is_better(m)]
    if report.by_length:
        lines += length_lines(report)
    if report.seed_groups:
        lines += ["", "over seeds: mean +- sd (each seed's value); delta against the first variant",
                  "(> spread: |delta| > 2 x pooled seed sd; p(perm): exact permutation test over seeds)"]
        seed_cmp = {(b, m): c for _, b, m, c in report.seed_comparisons}
        for metric in shown:
            for label, summaries in report.seed_groups.items():
                s = summaries[metric]
                values = ", ".join(f"{v:.2f}" for v in s.values.values())
                row = f"{metric:8} {label:{width}} {s.mean:7.2f} +- {s.sd:5.2f} ({values})"
                c = seed_cmp.get((label, metric))
                if c is not None:
                    row += f"  delta {c.delta:+.2f}{' > spread' if c.exceeds_spread else ''}  p(perm) " \
                           f"{c.p_permutation:.2f}"
                lines.append(row)
            lines.append("")
    return "\n".join(lines)
