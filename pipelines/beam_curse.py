"""The beam-search curse (Koehn & Knowles 2017; Stahlberg & Byrne 2019): beam 1-64 on the reference
translation model, with length penalty 0 (the plain sum of log-probs) and 1.0 (divided by length)."""

from __future__ import annotations

from pathlib import Path

from pipelines.core import Pipeline, Table, trained_then_decoded
from pipelines.tables import metric, missing, provenance, records, table

BEAMS = (1, 2, 4, 8, 16, 32, 64)
PENALTIES = ("0.0", "1.0")


def name(beams: int, penalty: str) -> str:
    return f"beam{beams}_lp{penalty}"


def curse(archive: Path) -> str:
    found = records(archive)
    if not found:
        return missing(archive)
    rows = []
    for k in BEAMS:
        cells = []
        for lp in PENALTIES:
            r = found.get(name(k, lp))
            cells += (["–"] * 4 if r is None else [
                metric(r, "hyp_logprob_per_seq"), metric(r, "bleu"), metric(r, "length_ratio", 3),
                f"{metric(r, 'empty_share')} / {metric(r, 'short_share')}"])
        rows.append([str(k), *cells])
    head = [f"lp {lp}: {c}" for lp in ("0", "1.0") for c in ("log-prob / seq", "BLEU", "length ratio",
                                                             "empty / short %")]
    return table(["beam", *head], rows) + "\n\n" + provenance(
        archive, found, [name(k, lp) for k in BEAMS for lp in PENALTIES])


PIPELINE = Pipeline(
    "beam_curse", "beam 1-64 without and with length normalization",
    trained_then_decoded("mt_bible_small", {name(k, lp): ("decoding=beam", f"decoding.num_beams={k}",
                                                          f"decoding.length_penalty={lp}")
                                            for k in BEAMS for lp in PENALTIES}),
    (Table("beam_curse", curse, "docs/experiments/beam_curse.md"),),
)
