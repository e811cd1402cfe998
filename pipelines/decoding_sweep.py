"""The decoding sweep: the reference translation model (mt_bible_small, 3,155 bf16 updates) decoded on the
Bible test split with every search and sampling preset of conf/sweep/decoding.yaml, each compared with
greedy search by sacreBLEU's paired tests; and diverse beam search against beam 8, both returning 8-best
lists."""

from __future__ import annotations

from pathlib import Path

from pipelines.core import compared, trained_then_decoded
from pipelines.tables import delta, metric, missing, paired_tests, provenance, records, table
from seqlab.pipeline.core import Pipeline, Table

PRESETS = ("greedy", "beam2_lp0.6", "beam2_lp1.0", "beam4_lp0.6", "beam4_lp1.0", "beam", "beam8_lp0.6", "beam8_lp1.0",
           "temp0.5", "temp0.7", "sample", "temp1.5", "temp2.0", "top_k10", "top_k", "top_p", "top_p0.95", "min_p",
           "typical", "epsilon", "eta", "top_n_sigma")
# the toolkits' scoring and search added later, tested against greedy in a comparison of their own (a comparison
# reads every evaluation's hypotheses: one over all presets would decode them all again)
TOOLKITS = ("beam_gnmt", "contrastive")
DIVERSE = ("beam8_nbest8", "diverse8_g4", "diverse8_g8")
DOC = "docs/experiments/decoding_sweep.md"


def sweep(archive: Path) -> str:
    found = records(archive)
    if "greedy" not in found:
        return missing(archive)
    vs = {**paired_tests(found, "vs_greedy"), **paired_tests(found, "vs_greedy_toolkits")}
    rows = [[s, metric(r, "bleu", ci=True), metric(r, "chrf", ci=True), metric(r, "rougeL"),
             metric(r, "hyp_logprob_per_seq"), metric(r, "distinct2"), metric(r, "sample_distinct2"),
             metric(r, "self_bleu", 1), metric(r, "length_ratio"), delta(vs.get(s, {}).get("bleu"))]
            for s in PRESETS + TOOLKITS if (r := found.get(s))]
    return table(["setting", "BLEU [95% CI]", "chrF [95% CI]", "ROUGE-L", "log-prob / seq", "distinct-2",
                  "sample distinct-2", "self-BLEU", "length ratio", "BLEU vs greedy"], rows) + "\n\n" + provenance(
        archive, found, list(PRESETS + TOOLKITS))


def diverse(archive: Path) -> str:
    found = records(archive)
    if "beam8_nbest8" not in found:
        return missing(archive)
    vs = paired_tests(found, "vs_beam8")
    rows = [[s, metric(r, "bleu", ci=True), delta(vs.get(s, {}).get("bleu")), metric(r, "sample_distinct2"),
             metric(r, "self_bleu", 1)] for s in DIVERSE if (r := found.get(s))]
    return table(["setting (8 beams, 8-best list)", "BLEU [95% CI]", "vs beam 8", "distinct-2 within the 8-best",
                  "self-BLEU of the 8-best"], rows) + "\n\n" + provenance(archive, found, list(DIVERSE))


PIPELINE = Pipeline(
    "decoding_sweep", "every decoding preset on the reference translation model, against greedy search",
    (*trained_then_decoded("mt_bible_small", {p: (f"decoding={p}",) for p in PRESETS + DIVERSE + TOOLKITS}),
     compared("vs_greedy", "greedy", PRESETS[1:]), compared("vs_beam8", "beam8_nbest8", DIVERSE[1:]),
     compared("vs_greedy_toolkits", "greedy", TOOLKITS)),
    (Table("decoding_sweep", sweep, DOC), Table("diverse_beam", diverse, DOC)),
)
