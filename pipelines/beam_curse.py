"""The beam-search curse (Koehn & Knowles 2017; Stahlberg & Byrne 2019): beam 1-64 on the reference
translation model, with length penalty 0 (the plain sum of log-probs) and 1.0 (divided by length), and scored
as GNMT (Wu et al. 2016): length penalty wu with alpha 0.6 and coverage penalty wu with beta 0.2."""

from __future__ import annotations

from pathlib import Path

from pipelines.core import trained_then_decoded
from pipelines.tables import metric, missing, provenance, records, table
from seqlab.pipeline.core import Pipeline, Table

BEAMS = (1, 2, 4, 8, 16, 32, 64)
PENALTIES = ("0.0", "1.0", "gnmt")
SCORING = {"0.0": ("decoding.length_penalty=0.0",), "1.0": ("decoding.length_penalty=1.0",),
           "gnmt": ("decoding.length_rule=wu", "decoding.length_penalty=0.6", "decoding.coverage_penalty=wu",
                    "decoding.coverage_beta=0.2")}
TITLES = {"0.0": "lp 0", "1.0": "lp 1.0", "gnmt": "GNMT"}


def name(beams: int, penalty: str) -> str:
    return f"beam{beams}_gnmt" if penalty == "gnmt" else f"beam{beams}_lp{penalty}"


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
    head = [f"{TITLES[lp]}: {c}" for lp in PENALTIES for c in ("log-prob / seq", "BLEU", "length ratio",
                                                                 "empty / short %")]
    return table(["beam", *head], rows) + "\n\n" + provenance(
        archive, found, [name(k, lp) for k in BEAMS for lp in PENALTIES])


PIPELINE = Pipeline(
    "beam_curse", "beam 1-64 without and with length normalization",
    trained_then_decoded("mt_bible_small", {name(k, lp): ("decoding=beam", f"decoding.num_beams={k}", *SCORING[lp])
                                            for k in BEAMS for lp in PENALTIES}),
    (Table("beam_curse", curse, "docs/experiments/beam_curse.md"),),
)
