"""No-repeat n-gram blocking against the repetition metric on the reference summarizer (sum_debian_small,
1,194 bf16 updates): greedy and beam 5, without and with blocking of repeated token 3- and 4-grams, each
against its unblocked decoding by paired bootstrap."""

from __future__ import annotations

from pathlib import Path

from pipelines.core import compared, trained_then_decoded
from pipelines.tables import delta, metric, missing, paired_tests, provenance, records, table
from seqlab.pipeline.core import Pipeline, Table

SEARCHES = ("greedy", "beam")
SIZES = (3, 4)


def decodings() -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for search in SEARCHES:
        out[search] = (f"decoding={search}",)
        for n in SIZES:
            out[f"{search}_no_repeat{n}"] = (f"decoding={search}", f"decoding.no_repeat_ngram_size={n}")
    return out


def no_repeat(archive: Path) -> str:
    found = records(archive)
    if not found:
        return missing(archive)
    rows = []
    for search in SEARCHES:
        vs = paired_tests(found, f"{search}_vs_plain")
        for s in (search, *(f"{search}_no_repeat{n}" for n in SIZES)):
            if (r := found.get(s)) is None:
                continue
            rows.append([s, metric(r, "repeated_3gram", 1), metric(r, "repeated_4gram", 1),
                         metric(r, "hyp_len_words", 1), metric(r, "rouge1"), metric(r, "rouge2"),
                         metric(r, "rougeL"), metric(r, "length_ratio"),
                         delta(vs.get(s, {}).get("rougeL"))])
    return table(["decoding", "repeated word 3-gram %", "repeated word 4-gram %", "words", "ROUGE-1", "ROUGE-2",
                  "ROUGE-L", "length ratio", "Δ ROUGE-L (p)"], rows) + "\n\n" + provenance(
        archive, found, list(decodings()))


PIPELINE = Pipeline(
    "no_repeat", "no-repeat n-gram blocking on the reference summarizer, greedy and beam 5",
    (*trained_then_decoded("sum_debian_small", decodings()),
     *(compared(f"{s}_vs_plain", s, tuple(f"{s}_no_repeat{n}" for n in SIZES)) for s in SEARCHES)),
    (Table("no_repeat", no_repeat, "docs/experiments/no_repeat.md"),),
)
