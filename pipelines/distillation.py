"""Sequence-level knowledge distillation (Kim & Rush 2016) at the study's trained recipe: the 3+3 baseline (seed 0)
decodes its training set with beam 5 (`seqlab distill`, archived with its outputs), a 5+1 student (the layer split's
shape) trains on those outputs with 3 seeds and the teacher's vocabulary, and each student is evaluated on the real
test set (greedy and beam 5) and tested against the undistilled 5+1 of its seed and against the teacher.

The question, decided before the runs: does distillation close the gap the layer split found between the 5+1 and the
3+3 model? Rule (the study's): a difference counts where the paired bootstrap and the approximate randomization test
both give p < 0.05 on a seed's test set, and the verdict holds where all three seeds agree in sign and significance;
otherwise "no significant difference". The teacher's and the undistilled 5+1's stages are the study's own (the same
digests: run once for both pipelines on a machine)."""

from __future__ import annotations

from pathlib import Path

from pipelines.core import compared
from pipelines.tables import delta, gpu_archive, gpu_note, metric, missing, paired_tests, provenance, records, table
from seqlab.analysis.study import RECIPES, VARIANTS
from seqlab.analysis.study_stages import study_stages
from seqlab.checkpoint import LAST
from seqlab.pipeline.core import EVAL_COMMON, Pipeline, Stage, Table

DOC = "docs/experiments/distillation.md"
RECIPE = RECIPES["trained"]
SEEDS = 3
TEACHER = "baseline-seed0"
CORPUS = "bible_es_en"  # the teacher's corpus: the students are tested on its test set, as the teacher is


def study_side() -> tuple[Stage, ...]:
    """The teacher (the baseline, seed 0) and the undistilled 5+1 (3 seeds), as the study declares them."""
    return tuple(s for s in study_stages(["layer_split"], RECIPE, SEEDS)
                 if s.name.split(".")[0] == TEACHER or s.name.startswith("enc5_dec1-"))


def student_stages(seed: int) -> tuple[Stage, ...]:
    name = f"student-seed{seed}"
    train = Stage(name, "train", (f"experiment={RECIPE.experiment}", f"seed={seed}", "run_name=distilled_enc5_dec1",
                                  *VARIANTS["enc5_dec1"], "data=distilled", "data.corpus.path=upstream",
                                  "train.tokenizer_from=upstream"),
                  after="distill")
    decoded = tuple(Stage(f"{name}.{label}", "evaluate", (f"decoding={preset}", f"corpus={CORPUS}", *EVAL_COMMON),
                          after=name, checkpoint=LAST) for label, preset in RECIPE.decodings.items())
    tests = (compared(f"{name}.vs_undistilled", f"enc5_dec1-seed{seed}.beam5", (f"{name}.beam5",)),
             compared(f"{name}.vs_teacher", f"{TEACHER}.beam5", (f"{name}.beam5",)))
    return (train, *decoded, *tests)


DISTILL = Stage("distill", "distill", ("decoding=beam", "precision=fp32", "engine=seqlab"), after=TEACHER,
                checkpoint=LAST)


def render(archive: Path) -> str:
    found, device_note = records(archive), ""
    if "distill" not in found and "distill" in records(gpu_archive(archive)):  # run on a lent GPU
        archive = gpu_archive(archive)
        found = records(archive)
        device_note = gpu_note(archive, [s for s in found if s != "distill"]) + "\n\n"
    if "distill" not in found:
        return missing(archive)
    d = found["distill"]["result"]
    rows = []
    for label, prefix, seeds in (("teacher 3+3 (seed 0)", "baseline", (0,)), ("5+1, undistilled", "enc5_dec1",
                                                                                range(SEEDS)),
                                 ("5+1, distilled", "student", range(SEEDS))):
        for seed in seeds:
            beam, greedy = found.get(f"{prefix}-seed{seed}.beam5"), found.get(f"{prefix}-seed{seed}.greedy")
            if beam is None:
                continue
            vs_5_1 = paired_tests(found, f"student-seed{seed}.vs_undistilled").get(f"student-seed{seed}.beam5", {})
            vs_t = paired_tests(found, f"student-seed{seed}.vs_teacher").get(f"student-seed{seed}.beam5", {})
            student = prefix == "student"
            rows.append([label, str(seed), metric(beam, "bleu", ci=True), metric(beam, "chrf"),
                         "–" if greedy is None else metric(greedy, "bleu"),
                         delta(vs_5_1.get("bleu")) if student else "", delta(vs_t.get("bleu")) if student else "",
                         metric(beam, "decode_tokens_per_s", 0)])
    note = (f"The teacher's beam-5 outputs for {d['examples']:,} training examples ({d['label']}, step "
            f"{d['step']}) are the students' training targets (`distill.train_targets.txt.gz` in the archive).")
    stages = ["distill", *(f"{p}-seed{s}.beam5" for p in ("enc5_dec1", "student") for s in range(SEEDS))]
    return device_note + (table(["model", "seed", "BLEU beam 5 [95% CI]", "chrF", "BLEU greedy", "vs undistilled 5+1",
                   "vs teacher", "tokens/s (beam 5)"], rows) + "\n\n" + note + "\n\n"
            + provenance(archive, found, [s for s in stages if s in found]))


PIPELINE = Pipeline(
    "distillation",
    "sequence-level distillation of the 3+3 study baseline into a 5+1 student, against the undistilled 5+1",
    (*study_side(), DISTILL, *(s for seed in range(SEEDS) for s in student_stages(seed))),
    (Table("distillation", render, DOC),),
)
