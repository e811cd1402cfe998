"""Quality-aware decoding (Fernandes et al. 2022; Freitag et al. 2022) on the reference translation model: beam 5,
MBR with chrF and with COMET over 32 epsilon samples, and beam 8's n-best list reranked by CometKiwi, each
scored with BLEU, chrF, COMET and CometKiwi, and tested against beam 5. The metric models are the real ones
(Unbabel/wmt22-comet-da, Unbabel/wmt22-cometkiwi-da) and must be in the local Hugging Face cache: seqlab never
downloads, so until they are, the pipeline stops at its first decoding with the cache path and the command
that fetches them, and its page says that nothing has been measured.

The question, decided before the runs: does MBR with COMET beat beam search on COMET, and what does it cost in
BLEU and in time? A metric used as the utility favours itself (Freitag et al. 2022 report the bias), so the
verdict on COMET-MBR is read on CometKiwi and chrF as well as on COMET; a difference counts where the paired
bootstrap and approximate randomization both give p < 0.05."""

from __future__ import annotations

from pathlib import Path

from pipelines.core import compared, trained_then_decoded
from pipelines.tables import delta, metric, paired_tests, provenance, records, table
from seqlab.pipeline.core import Pipeline, Table

DOC = "docs/experiments/quality_aware.md"
METRICS = "metrics=[bleu,chrf,comet,cometkiwi]"
SETTINGS = {"beam": ("decoding=beam",), "mbr_chrf": ("decoding=mbr_chrf",), "mbr_comet": ("decoding=mbr_comet",),
            "qe_cometkiwi": ("decoding=qe_cometkiwi",)}


def render(archive: Path) -> str:
    found = records(archive)
    if "beam" not in found:
        return ("_Not measured: the pipeline needs Unbabel/wmt22-comet-da and Unbabel/wmt22-cometkiwi-da (and their "
                "encoders) in the local Hugging Face cache ([neural_metrics.md](../neural_metrics.md#getting-the-"
                f"weights)); then `make pipeline NAME={archive.name}`._")
    vs = paired_tests(found, "vs_beam5")
    rows = [[s, metric(r, "bleu", ci=True), delta(vs.get(s, {}).get("bleu")), metric(r, "chrf"),
             delta(vs.get(s, {}).get("chrf")), metric(r, "comet", ci=True), delta(vs.get(s, {}).get("comet")),
             metric(r, "cometkiwi"), delta(vs.get(s, {}).get("cometkiwi")), metric(r, "decode_seconds", 0)]
            for s in SETTINGS if (r := found.get(s))]
    return (table(["setting", "BLEU [95% CI]", "vs beam 5", "chrF", "vs beam 5", "COMET [95% CI]", "vs beam 5",
                   "CometKiwi", "vs beam 5", "decoding (s)"], rows)
            + "\n\n" + provenance(archive, found, list(SETTINGS)))


PIPELINE = Pipeline(
    "quality_aware",
    "MBR with COMET and CometKiwi reranking against beam search, scored with COMET (real metric weights needed)",
    (*trained_then_decoded("mt_bible_small", {s: (*o, METRICS) for s, o in SETTINGS.items()}),
     compared("vs_beam5", "beam", tuple(SETTINGS)[1:])),
    (Table("quality_aware", render, DOC),),
)
