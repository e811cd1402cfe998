"""Truncation at high temperature: pure sampling, top-k 50, top-p 0.9, min-p 0.1 and top-n-sigma 1 at
temperatures 1, 1.5 and 2 (temperature applied before truncation, Hugging Face's order) on the reference
translation model; each method against top-p at the same temperature, and top-n-sigma at T=2 against T=1."""

from __future__ import annotations

from pathlib import Path

from pipelines.core import compared, trained_then_decoded
from pipelines.tables import delta, metric, missing, paired_tests, provenance, records, table
from seqlab.pipeline.core import Pipeline, Table

TEMPERATURES = ("1", "1.5", "2")
METHODS = {  # method -> its preset at each temperature
    "pure sampling": ("sample", "temp1.5", "temp2.0"),
    "top-k 50": ("top_k", "top_k_t1.5", "top_k_t2.0"),
    "top-p 0.9": ("top_p", "top_p_t1.5", "top_p_t2.0"),
    "min-p 0.1": ("min_p", "min_p_t1.5", "min_p_t2.0"),
    "top-n-sigma 1": ("top_n_sigma", "top_n_sigma_t1.5", "top_n_sigma_t2.0"),
}
BASE = "top-p 0.9"


def by_temperature(i: int) -> tuple[str, ...]:
    """The presets at the i-th temperature, top-p first (the baseline of its comparison)."""
    return (METHODS[BASE][i], *(p[i] for m, p in METHODS.items() if m != BASE))


def truncation(archive: Path) -> str:
    found = records(archive)
    if not all(p in found for p in METHODS[BASE]):
        return missing(archive)
    vs = [paired_tests(found, f"vs_top_p_t{t}") for t in TEMPERATURES]
    rows = []
    for method, presets in METHODS.items():
        cells = [metric(found[p], "bleu", ci=True) + (f" ({delta(vs[i].get(p, {}).get('bleu'))})"
                                                      if method != BASE and p in found else "")
                 for i, p in enumerate(presets) if p in found]
        rows.append([method, *cells, *(metric(found[p], "self_bleu", 1) for p in presets if p in found)])
    tns = paired_tests(found, "top_n_sigma_t2_vs_t1").get("top_n_sigma_t2.0", {}).get("bleu")
    note = f"\n\nTop-n-sigma at T=2 against T=1: {delta(tns)}." if tns else ""
    return (table(["method", *(f"BLEU, T={t} (vs top-p)" for t in TEMPERATURES),
                   *(f"self-BLEU, T={t}" for t in TEMPERATURES)], rows) + note + "\n\n"
            + provenance(archive, found, [p for ps in METHODS.values() for p in ps]))


PIPELINE = Pipeline(
    "truncation", "sampling truncation at temperatures 1, 1.5 and 2, each method against top-p",
    (*trained_then_decoded("mt_bible_small", {p: (f"decoding={p}",) for ps in METHODS.values() for p in ps}),
     *(compared(f"vs_top_p_t{t}", by_temperature(i)[0], by_temperature(i)[1:]) for i, t in enumerate(TEMPERATURES)),
     compared("top_n_sigma_t2_vs_t1", "top_n_sigma", ("top_n_sigma_t2.0",))),
    (Table("truncation", truncation, "docs/experiments/truncation.md"),),
)
