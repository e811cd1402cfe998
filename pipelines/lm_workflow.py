"""The causal-LM workflow on the Bible, end to end as a user runs it on a pretrained instruct model: a Llama-shaped
decoder-only LM trained here (conf/experiment/lm_workflow.yaml), written as a Hugging Face Llama folder by `seqlab
export` (its source-then-target layout as the folder's chat template) and read back by `seqlab import`, then asked
zero-shot through its chat template, two-shot (two validation pairs as earlier turns), and after LoRA fine-tuning
on the training pairs with the loss on the target alone (ALMA's recipe); each greedy, on the test split, with
paired tests against the archived 3 + 3 encoder-decoder's greedy outputs (mt_bible_small) and against the
zero-shot model.

It shows the workflow, not a pretrained model's quality: the model is small and trained for minutes. One check of
exactness rides along: the imported model asked zero-shot must give the trained checkpoint's own greedy outputs
(`native.greedy`), since the folder's chat template lays out the very ids the trained model decodes from."""

from __future__ import annotations

from pathlib import Path

from pipelines.tables import delta, metric, missing, paired_tests, provenance, records, significant, table
from seqlab.checkpoint import LAST
from seqlab.pipeline.core import EVAL_COMMON, Pipeline, Stage, Table

DOC = "docs/language_models.md"
BASELINE = "mt_bible_small/greedy"  # the 3 + 3 encoder-decoder's greedy outputs, archived
# how the imported model is asked: its chat template (the trained layout) over the bare source, greedy, the test
# split of the corpus (an imported checkpoint names none); 200 new tokens at most (the longest reference has ~150)
ASKED = ("corpus=bible_es_en", "prompt.chat=true", "decoding=greedy", "decoding.max_length=200", *EVAL_COMMON)
SHOTS = 2  # validation pairs before each source in the few-shot setting (the default shots split)
SFT = ("experiment=lm_workflow", "train.init_from=upstream", "prompt.chat=true", "train.lora.r=16",
       "train.lora.alpha=32", "optim.lr=5.0e-4", "optim.warmup_steps=30", "trainer.max_steps=150",
       "train.val_every_n_steps=75", "train.checkpoint_every_n_steps=75")
SETTINGS = {  # evaluation stage -> how the table names it
    "native.greedy": "trained checkpoint, seqlab's own layout",
    "zero_shot.greedy": "imported folder, zero-shot (chat template)",
    "few_shot.greedy": f"imported folder, {SHOTS}-shot (chat turns)",
    "sft.greedy": "imported folder, LoRA fine-tuned (150 updates)",
}

STAGES = (
    Stage("train", "train", ("experiment=lm_workflow",)),
    Stage("native.greedy", "evaluate", ("decoding=greedy", "decoding.max_length=200", *EVAL_COMMON), after="train",
          checkpoint=LAST),
    Stage("hf", "hf", after="train", checkpoint=LAST),
    Stage("zero_shot.greedy", "evaluate", ASKED, after="hf"),
    Stage("few_shot.greedy", "evaluate", (*ASKED, f"prompt.shots={SHOTS}"), after="hf"),
    Stage("sft", "train", SFT, after="hf"),
    # the fine-tuned checkpoint asks with the prompt it was trained with (it keeps it)
    Stage("sft.greedy", "evaluate", ("decoding=greedy", "decoding.max_length=200", *EVAL_COMMON), after="sft",
          checkpoint=LAST),
    Stage("vs_reference", "compare", compares=tuple(SETTINGS), baseline=BASELINE),
    Stage("vs_zero_shot", "compare", compares=("zero_shot.greedy", "few_shot.greedy", "sft.greedy")),
)


def render(archive: Path) -> str:
    found = records(archive)
    if not any(s in found for s in SETTINGS):
        return missing(archive)
    vs_ref, vs_zero = paired_tests(found, "vs_reference"), paired_tests(found, "vs_zero_shot")
    rows = []
    for stage, label in SETTINGS.items():
        if stage not in found:
            continue
        r = found[stage]
        rows.append([label, metric(r, "bleu", ci=True), metric(r, "chrf", ci=True),
                     delta(vs_ref.get(stage, {}).get("bleu")), delta(vs_ref.get(stage, {}).get("chrf")),
                     delta(vs_zero.get(stage, {}).get("bleu")), metric(r, "decode_tokens_per_s", 0)])
    base = found.get("vs_reference")
    m = base["result"]["systems"][0].get("metrics") if base is not None else None
    if m:  # the baseline's own scores, from the comparison (its record is another experiment's)
        rows.insert(0, ["3 + 3 encoder-decoder (`mt_bible_small`), greedy", scored(m["bleu"]), scored(m["chrf"]),
                        "baseline", "", "", ""])
    notes = []
    if "native.greedy" in found and "zero_shot.greedy" in found:
        same = same_outputs(archive, found["native.greedy"], found["zero_shot.greedy"])
        notes.append(f"The imported folder asked zero-shot gives the trained checkpoint's own greedy outputs on "
                     f"{same[0]:,} of {same[1]:,} test sentences (the chat template lays out the ids it was "
                     "trained on).")
    if "few_shot.greedy" in found:
        empty = found["few_shot.greedy"]["result"]["metrics"].get("empty_share")
        if empty is not None:
            notes.append(f"Asked {SHOTS}-shot, {empty:.0f}% of its outputs are empty: trained on one pair per "
                         "sequence, the model reads the earlier pairs' end token as its own target's and ends at "
                         "once; few-shot prompting needs a model trained on text holding several pairs, as a "
                         "pretrained LM's is.")
    tuned = vs_zero.get("sft.greedy", {}).get("bleu")
    if tuned is not None:
        verdict = "a significant difference" if significant(tuned) else "no significant difference"
        notes.append(f"LoRA fine-tuning with the loss on the target, on the layout the model was trained on, "
                     f"moves BLEU by {delta(tuned)} against zero-shot: {verdict}.")
    if "hf" in found:
        hf = found["hf"]["result"]
        notes.append(f"The exported folder: `{hf['family']}` ({', '.join(hf['architectures'] or [])}), files "
                     f"{', '.join(f'`{n}`' for n in hf['files'])}.")
    if "train" in found:
        t = found["train"]["result"]
        notes.append(f"The model ({t['params']:,} parameters) trained {t['steps']:,} fp32 updates"
                     + (f", final validation loss {t['val_curve'][-1][1]:.3f}." if t.get("val_curve") else "."))
    stages = [s for s in ("train", *SETTINGS) if s in found]
    head = ["model, asked", "BLEU [95% CI]", "chrF [95% CI]", "BLEU vs 3 + 3", "chrF vs 3 + 3", "BLEU vs zero-shot",
            "tokens/s"]
    return "\n\n".join([table(head, rows), " ".join(notes), provenance(archive, found, stages)])


def scored(interval: dict) -> str:
    """A comparison's score with its bootstrap interval."""
    low, high = interval["ci"]
    return f"{interval['score']:.2f} [{low:.2f}, {high:.2f}]"


def same_outputs(archive: Path, a: dict, b: dict) -> tuple[int, int]:
    """How many test sentences two archived evaluations translated identically, of how many."""
    from seqlab.io import read_lines_gz

    x = read_lines_gz(archive / a["result"]["outputs"]["hypotheses"])
    y = read_lines_gz(archive / b["result"]["outputs"]["hypotheses"])
    return sum(p == q for p, q in zip(x, y, strict=True)), len(x)


PIPELINE = Pipeline(
    "lm_workflow",
    "a decoder-only LM trained here, exported and imported as a Hugging Face Llama folder, asked zero-shot, "
    "few-shot and after LoRA fine-tuning, against the 3 + 3 encoder-decoder",
    STAGES,
    (Table("lm_workflow", render, DOC),),
)
