"""Minimum Bayes risk against beam search. On the reference translation model: MBR with chrF and BLEU
utilities over 32 and 64 epsilon samples, and beam 8's 8-best list reranked by chrF, each against beam 5
(and the reranking against beam 8 itself). On the reference summarizer: MBR with ROUGE-1 and ROUGE-L
utilities against beam 5 with trigram blocking."""

from __future__ import annotations

from pathlib import Path

from pipelines.core import compared, trained_then_decoded
from pipelines.tables import Row, delta, metric, missing, paired_tests, provenance, records, table
from seqlab.pipeline.core import Pipeline, Table

MT = ("beam", "mbr_chrf", "mbr_bleu", "mbr_chrf64", "mbr_bleu64", "mbr_beam8_chrf")
SUM = {"sum_beam_norepeat3": ("decoding=beam", "decoding.no_repeat_ngram_size=3"),
       "sum_mbr_rouge1": ("decoding=mbr_rouge1",), "sum_mbr_rougeL": ("decoding=mbr_rougeL",)}
DOC = "docs/experiments/mbr.md"


def ms_per_sentence(r: Row) -> str:
    """Decoding time per test sentence: candidates + utilities for MBR."""
    m = r["result"]["metrics"]
    n = m.get("n_examples") or 1
    if m.get("mbr_seconds") is not None:
        return f"{1e3 * m['generate_seconds'] / n:.0f} + {1e3 * m['mbr_seconds'] / n:.0f}"
    return f"{1e3 * m['decode_seconds'] / n:.0f}" if m.get("decode_seconds") is not None else "–"


def translation(archive: Path) -> str:
    found = records(archive)
    if "beam" not in found:
        return missing(archive)
    vs = paired_tests(found, "vs_beam5")
    rows = [[s, metric(r, "bleu", ci=True), delta(vs.get(s, {}).get("bleu")), metric(r, "chrf"),
             delta(vs.get(s, {}).get("chrf")), metric(r, "length_ratio", 3), metric(r, "hyp_logprob_per_seq"),
             ms_per_sentence(r)] for s in (*MT, "beam8_lp1.0") if (r := found.get(s))]
    rerank = paired_tests(found, "rerank_vs_beam8").get("mbr_beam8_chrf", {})
    note = (f"\n\nThe reranked 8-best against beam 8 itself: BLEU {delta(rerank.get('bleu'))}, chrF "
            f"{delta(rerank.get('chrf'))}." if rerank else "")
    return (table(["setting", "BLEU [95% CI]", "vs beam 5", "chrF", "vs beam 5", "length ratio", "log-prob / seq",
                   "ms / sentence (candidates + utilities)"], rows) + note + "\n\n"
            + provenance(archive, found, [*MT, "beam8_lp1.0"]))


def summaries(archive: Path) -> str:
    found = records(archive)
    if "sum_beam_norepeat3" not in found:
        return missing(archive)
    vs = paired_tests(found, "sum_vs_beam")
    rows = []
    for s in SUM:
        if (r := found.get(s)) is None:
            continue
        t = vs.get(s, {})
        rows.append([s, metric(r, "rouge1", ci=True), delta(t.get("rouge1")), metric(r, "rouge2"),
                     delta(t.get("rouge2")), metric(r, "rougeL"), delta(t.get("rougeL")), ms_per_sentence(r)])
    return table(["setting", "ROUGE-1 [95% CI]", "vs beam", "ROUGE-2", "vs beam", "ROUGE-L", "vs beam",
                  "ms / sentence"], rows) + "\n\n" + provenance(archive, found, list(SUM))


PIPELINE = Pipeline(
    "mbr", "minimum Bayes risk against beam search, on both reference models",
    (*trained_then_decoded("mt_bible_small", {s: (f"decoding={s}",) for s in (*MT, "beam8_lp1.0")}),
     compared("vs_beam5", "beam", MT[1:]), compared("rerank_vs_beam8", "beam8_lp1.0", ("mbr_beam8_chrf",)),
     *trained_then_decoded("sum_debian_small", SUM, train_name="sum_train"),
     compared("sum_vs_beam", "sum_beam_norepeat3", tuple(SUM)[1:])),
    (Table("mbr_translation", translation, DOC), Table("mbr_summaries", summaries, DOC)),
)
