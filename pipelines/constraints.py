"""Lexically constrained decoding on the reference translation model (mt_bible_small, 3,155 bf16 updates), in
the setting of Post & Vilar (2018): one or two words of each verse's reference as constraints, ordered and
unordered, in fairseq's constrained beam search (beam 5), against the same search without constraints by
paired tests; with the share of constraints met and what they cost in speed."""

from __future__ import annotations

from pathlib import Path

from pipelines.core import compared, trained_then_decoded
from pipelines.tables import delta, metric, missing, paired_tests, provenance, records, table
from seqlab.inference.constraints import words_of
from seqlab.io import read_lines_gz
from seqlab.pipeline.core import Pipeline, Table

BASE = "beam5_fairseq"  # the same search and code path, no constraints: fairseq's plain beam search
SETTINGS = {
    BASE: (),
    "unordered1": ("decoding.constraint_words=1",),
    "unordered2": ("decoding.constraint_words=2",),
    "ordered2": ("decoding.constraints=ordered", "decoding.constraint_words=2"),
}


def decodings() -> dict[str, tuple[str, ...]]:
    return {name: ("decoding=beam", "decoding.constraints=unordered", *extra) for name, extra in SETTINGS.items()}


def already_there(archive: Path, found: dict, name: str) -> str:
    """% of the stage's constraint words that the unconstrained search's output has anyway (words compared as
    they were drawn: punctuation stripped), from the archived outputs; '–' where they are not archived."""
    words_file = found[name]["result"].get("outputs", {}).get("constraints")
    base_file = found[BASE]["result"].get("outputs", {}).get("hypotheses")
    if not words_file or not base_file:
        return "–"
    hits = total = 0
    for line, hyp in zip(read_lines_gz(archive / words_file), read_lines_gz(archive / base_file), strict=True):
        have = set(words_of(hyp))
        words = [w for w in line.split("\t") if w]
        hits, total = hits + sum(w in have for w in words), total + len(words)
    return f"{100.0 * hits / max(total, 1):.1f}"


def constraints(archive: Path) -> str:
    found = records(archive)
    if BASE not in found:
        return missing(archive)
    vs = paired_tests(found, "vs_unconstrained")
    base_speed = found[BASE]["result"]["metrics"].get("decode_sentences_per_s")
    rows = []
    for name in SETTINGS:
        if (r := found.get(name)) is None:
            continue
        m = r["result"]["metrics"]
        speed = m.get("decode_sentences_per_s")
        ratio = f"{speed / base_speed:.2f}" if speed and base_speed else "–"
        rows.append([name, already_there(archive, found, name) if name != BASE else "–",
                     metric(r, "constraints_met", 1), metric(r, "constrained_all_met", 1),
                     metric(r, "bleu", ci=True), delta(vs.get(name, {}).get("bleu")), metric(r, "chrf", ci=True),
                     delta(vs.get(name, {}).get("chrf")), metric(r, "length_ratio"),
                     metric(r, "decode_sentences_per_s", 1), ratio])
    return table(["decoding (beam 5)", "words in the unconstrained output %", "constraints met %",
                  "verses with all met %", "BLEU [95% CI]",
                  "Δ BLEU (p)", "chrF [95% CI]", "Δ chrF (p)", "length ratio", "verses / s", "speed vs none"],
                 rows) + "\n\n" + provenance(archive, found, list(SETTINGS))


PIPELINE = Pipeline(
    "constraints", "lexically constrained beam search with reference words on the reference translation model",
    (*trained_then_decoded("mt_bible_small", decodings()),
     compared("vs_unconstrained", BASE, tuple(s for s in SETTINGS if s != BASE))),
    (Table("constraints", constraints, "docs/experiments/constraints.md"),),
)
