"""The architecture study at a trained budget: every question of the trained recipe
(seqlab.analysis.study_questions), each rendered by its own table function once all its runs are archived,
the claims its numbers test, early vs trained, and the layer split's decoding speed. Its runs go through
`make study-trained` (a worktree at a fixed commit, records committed as they land); a table rendered while
records still land would go stale with each commit, so a question shows one "pending" line until then."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from pipelines.bench import bench_records, machine_heading
from pipelines.tables import commit_of, gpu_archive, gpu_note, table
from seqlab.analysis.study import RECIPES, SEEDS, TRAINING, VARIANT_DESCRIPTIONS, Archived, Runs, load_records
from seqlab.analysis.study_claims import early_vs_trained
from seqlab.analysis.study_questions import QUESTIONS, STUDY, claims_table
from seqlab.analysis.study_stages import queued_stages
from seqlab.analysis.study_tables import machines_table, question_png
from seqlab.bench.architectures import ARCHITECTURES, decode_from_dict
from seqlab.metrics import keys as K
from seqlab.metrics.seeds import summarize
from seqlab.pipeline.core import Pipeline, Stage, Table

DOC = "docs/experiments/arch_study_trained.md"
REPORTED = "beam5"
# the questions of the trained recipe beyond the design ones, in their order: each its own section
LATER = tuple(q for q, question in QUESTIONS.items() if question.recipes == ("trained",))


def headline(archive: Path) -> str:
    """The README's headline: once the design questions are all archived, each variant's validation loss and
    BLEU (beam 5 and greedy), mean ± sd over its seeds, the relative positions' too once theirs are; until
    then the baseline's first seed (a record that never changes once archived, unlike a table of the runs
    landing)."""
    training = load_records(archive, TRAINING)
    if not all(complete(training, q) for q in STUDY):
        return baseline(archive)
    beam, greedy = load_records(archive, REPORTED), load_records(archive, "greedy")
    shown = [*STUDY, *(q for q in LATER if QUESTIONS[q].compared_on_test and complete(training, q))]
    variants = list(dict.fromkeys(v for q in shown for v in QUESTIONS[q].variants))
    lines = [f"The architecture study at its trained budget ({SEEDS} seeds per variant, "
             f"[the tests and verdicts](docs/experiments/arch_study_trained.md)):", "",
             f"| variant ({training[(variants[0], 0)].steps:,} updates) | val loss | beam-5 BLEU | greedy BLEU |",
             "|---|---|---|---|"]
    for v in variants:
        val = summarize({s: training[(v, s)].final_val_loss for s in range(SEEDS)})
        b, g = (summarize({s: by[(v, s)].metrics[K.BLEU] for s in range(SEEDS)}) for by in (beam, greedy))
        lines.append(f"| {v} ({VARIANT_DESCRIPTIONS.get(v, v)}) | {val.mean:.3f} ± {val.sd:.3f} | "
                     f"{b.mean:.2f} ± {b.sd:.2f} | {g.mean:.2f} ± {g.sd:.2f} |")
    return "\n".join(lines)


def baseline(archive: Path) -> str:
    """The trained baseline's first seed, both decodings."""
    rows = []
    for label in ("beam5", "greedy"):
        r = load_records(archive, label).get(("baseline", 0))
        if r is None:
            continue
        m, ci = r.metrics, r.metrics.get("bleu_ci") or [float("nan")] * 2
        rows.append(f"| baseline, seed 0 | {r.steps:,} | {label} | {m['bleu']:.2f} [{ci[0]:.2f}, {ci[1]:.2f}] | "
                    f"{m['chrf']:.2f} | {(r.training or {}).get('commit', '')[:10]} |")
    if not rows:
        return "_No archived run yet._"
    return "\n".join(["The trained baseline, the first run of the architecture study at its trained budget:", "",
                      "| model | updates | decoding | BLEU [95% CI] | chrF | commit |", "|---|---|---|---|---|---|",
                      *rows])


def complete(training: Runs, question: str) -> bool:
    """Whether every run of the question is archived (each variant, SEEDS seeds), by the archive's training
    records."""
    return all(k in training for k in QUESTIONS[question].runs())


def pending(question: str) -> str:
    """What stands in for a question's table until all its runs are archived: one line that does not change
    as they land (a partial table would go stale with each record the runner commits)."""
    q = QUESTIONS[question]
    return f"_{q.title}: pending; its table joins this page once all {len(q.runs())} of its runs are archived._"


def decoded(archive: Path, questions: list[str], label: str, training: Runs) -> dict[str, tuple[str, dict[str, Any]]]:
    """question -> (table, numbers) from the archive (`label`: the decodings a question compared on the test
    set reads), for the questions complete in `training` (the archive's training records)."""
    done = [q for q in questions if complete(training, q)]
    return {q: _question(archive, q, label, contents(archive)) for q in done}


def contents(archive: Path) -> tuple[tuple[str, int, int], ...]:
    """What identifies the archive's records and test-set files now: their names, sizes and modification
    times."""
    files = sorted([*archive.glob("*.json"), *archive.glob("test.*.txt.gz")])
    return tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files)


@functools.lru_cache(maxsize=32)
def _question(archive: Path, question: str, label: str, contents_now: tuple) -> tuple[str, dict[str, Any]]:
    """One question's table, computed once per archive contents: its section and the claims both need it
    (the beam-5 tests, a paired bootstrap per seed and comparison, are the bulk of rendering this page)."""
    return QUESTIONS[question].numbers(_archived(archive, label, contents_now))


@functools.lru_cache(maxsize=8)
def _archived(archive: Path, label: str, _contents: tuple) -> Archived:
    """The archive's records for `label` (and its training records), read once per archive contents for all
    its questions' tables."""
    return Archived.load(archive, label)


def design(archive: Path) -> str:
    """The design questions at beam 5 (mean +- sd, each seed, the tests), their validation curves and the
    machines that trained them, each question once all its runs are archived."""
    training = load_records(archive, TRAINING)
    tables = decoded(archive, list(STUDY), REPORTED, training)
    parts = [tables[q][0] if q in tables else pending(q) for q in STUDY]
    if len(tables) == len(STUDY):
        studied = {k: r for k, r in training.items() if any(k[0] in QUESTIONS[q].variants for q in STUDY)}
        parts += [f"![Validation loss of every run, mean and range over seeds]"
                  f"(../../results/{archive.name}/val_loss.{REPORTED}.png)", machines_table(studied)[0]]
    return "\n\n".join(parts)


def claims(archive: Path) -> str:
    """The claims against the papers (beam 5; a question judged on training by its own rule) and early vs
    trained (greedy, the setting both budgets decode), by the rules fixed before the runs, once the design
    questions are all archived (each later question's claims once its runs are)."""
    training = load_records(archive, TRAINING)
    reported = {q: data for q, (_, data) in decoded(archive, [*STUDY, *LATER], REPORTED, training).items()}
    if not all(q in reported for q in STUDY):
        return "_The verdicts join this page once every run of the design questions is archived._"
    trained_greedy = {q: data for q, (_, data) in decoded(archive, list(STUDY), "greedy", training).items()}
    short_archive = archive.parent / RECIPES["short"].archive.name
    short_greedy = {q: data for q, (_, data) in decoded(short_archive, list(STUDY), "greedy",
                                                        load_records(short_archive, TRAINING)).items()}
    return ("**Against the papers** (beam 5)\n\n" + claims_table(reported)
            + "\n\n**Early vs trained** (greedy, the setting both budgets decode)\n\n"
            + early_vs_trained(short_greedy, trained_greedy))


def section(question: str, archive: Path) -> str:
    """A question of the trained recipe alone (its table, by its own function; the reported decoding's where
    it is compared on the test set), once all its runs are archived, with its own validation curves once drawn
    (`seqlab study QUESTION --recipe trained --from-archive`)."""
    tables = decoded(archive, [question], REPORTED, load_records(archive, TRAINING))
    note = ""
    gpu = gpu_archive(archive)
    if not tables and gpu.is_dir():  # its runs made on a lent GPU, baseline included (make gpu-study)
        tables = decoded(gpu, [question], REPORTED, load_records(gpu, TRAINING))
        archive = gpu
        note = gpu_note(gpu, [f"{v}-seed{s}" for v, s in QUESTIONS[question].runs()]) + "\n\n"
    if not tables:
        return pending(question)
    q, png = QUESTIONS[question], question_png(question)
    curves = (f"\n\n![{q.curves.caption}](../../results/{archive.name}/{png})"
              if q.curves is not None and (archive / png).is_file() else "")
    return note + tables[question][0] + curves


# The layer split's decoding speed: trained checkpoints timed on the test set in one run on a quiet machine
# (`seqlab bench checkpoints=[...]`), label -> checkpoint, the 3+3 reference first. The study's own 3+3 runs
# were trained on other machines, so the 3+3 timed is the reference model (mt_bible_small's pipeline: the
# study baseline's architecture, data and bf16 training, 3,155 updates where the study's take 3,300); the split
# models are the study's seed-0 runs, where their run folders were when they were timed.
LAYER_SPLIT_SPEED = {
    "3+3 (the reference model)": "../seqlab-experiments/outputs/pipelines/train-6e63f63bd501ad77/checkpoints/last.ckpt",
    "5+1 (enc5_dec1, seed 0)": "../seqlab-study/outputs/arch_study_trained/runs/enc5_dec1-seed0/checkpoints/best.ckpt",
    "1+5 (enc1_dec5, seed 0)": "../seqlab-study/outputs/arch_study_trained/runs/enc1_dec5-seed0/checkpoints/best.ckpt",
}
SPEED_STAGE = Stage("layer_split_speed", "bench", (f"checkpoints=[{','.join(LAYER_SPLIT_SPEED.values())}]",
                                                   "bench.decode_sources=0"))


def speed(row: dict[str, Any]) -> str:
    """A checkpoint timing's tokens/s and, in brackets, its speed against the first checkpoint's."""
    return f"{row['tokens'] / row['seconds']:,.0f} ({row['first_seconds'] / row['seconds']:.2f}x)"


def layer_split_speed(archive: Path) -> str:
    """The layer split's decoding speed on the test set, once timed (its quality is the question's table)."""
    parts = []
    labels = {path: label for label, path in LAYER_SPLIT_SPEED.items()}
    for record in bench_records(archive, f"{SPEED_STAGE.name}-*.json"):
        result, man = record["result"], record["manifest"]
        rows: dict[str, dict[str, Any]] = {}
        for r in result["checkpoints"]:
            rows.setdefault(labels.get(r["checkpoint"], r["checkpoint"]), {})[r["decoding"]] = r
        body = [[label, *(speed(by[d]) for d in ("greedy", "beam5"))] for label, by in rows.items()]
        first = next(iter(rows.values()))["greedy"]
        parts.append(f"Decoding speed on the test set ({first['sources']:,} sentences, fp32, seqlab's engine, "
                     f"batched as an evaluation batches them, best of {result['config']['decode_repeats']}; "
                     f"**{man['cpu']}**, {result['threads']} threads, other processes' load "
                     f"{result['others_busy_cores']:.2f} cores; commit {commit_of(man)}; {man['date'][:10]}). "
                     "Tokens/s, and in brackets the speed against 3+3 on the same sentences:\n\n"
                     + table(["model", "greedy tokens/s", "beam-5 tokens/s"], body))
    return "\n\n".join(parts) or (f"_Not yet timed: `python -m pipelines arch_study_trained --only "
                                   f"{SPEED_STAGE.name}` on a quiet machine._")


# The architecture question's decoding speed: the three architectures at equal parameters, random weights, on one
# quiet machine (`seqlab bench architectures=true`), every output forced to one length so that only the
# architecture differs; sources at three lengths, since a one-stack model's every step reads the source's keys
# in all 6 layers. No training: it runs on any CPU, apart from the question's trainings.
ARCHITECTURE_SPEED = Stage("architecture_speed", "bench", ("architectures=true",))
ARCHITECTURE_NAMES = {"encoder_decoder": "encoder-decoder (3+3)", "decoder_only": "decoder-only LM (6)",
                      "prefix_lm": "prefix LM (6)"}


def architecture_speed(archive: Path) -> str:
    """Each architecture's greedy and beam tokens/s per source length, and in brackets its speed against the
    encoder-decoder on the same sources."""
    parts = []
    for record in bench_records(archive, f"{ARCHITECTURE_SPEED.name}-*.json"):
        rows = decode_from_dict(record["result"]["architectures_decoding"])
        by = {(r.architecture, r.decoding, r.source_tokens): r for r in rows}
        decodings = list(dict.fromkeys(r.decoding for r in rows))
        body = []
        for length in dict.fromkeys(r.source_tokens for r in rows):
            for arch in ARCHITECTURES:
                cells = []
                for d in decodings:
                    r, base = by[(arch, d, length)], by[("encoder_decoder", d, length)]
                    cells.append(f"{r.tokens_per_s:,.0f} ({r.tokens_per_s / base.tokens_per_s:.2f}x)")
                body.append([str(length), ARCHITECTURE_NAMES[arch], *cells])
        cfg = record["result"]["config"]
        parts.append(machine_heading(record, f"{cfg['decode_sources']} random sources a length, every output "
                                             f"{cfg['max_new_tokens']} tokens, random weights, fp32, seqlab's "
                                             f"engine, best of {cfg['decode_repeats']}") + "\n\n"
                     + table(["source tokens", "model", *(f"{d} tokens/s" for d in decodings)], body))
    return "\n\n".join(parts) or (f"_Not yet timed: `python -m pipelines arch_study_trained --only "
                                   f"{ARCHITECTURE_SPEED.name}` on a quiet machine._")


def question_groups() -> list[list[str]]:
    """The trained recipe's questions in their order, the design questions as one group: what runs in turn."""
    later = [q for q, question in QUESTIONS.items() if "trained" in question.recipes and q not in STUDY]
    return [list(STUDY), *([q] for q in later)]


PIPELINE = Pipeline(
    "arch_study_trained", "the architecture study at a trained budget (beam 5 and greedy)",
    (*queued_stages(question_groups(), RECIPES["trained"]), SPEED_STAGE, ARCHITECTURE_SPEED),
    (Table("arch_study_trained_design", design, DOC), Table("arch_study_trained_claims", claims, DOC),
     *(Table(f"arch_study_trained_{q}", functools.partial(section, q), DOC) for q in LATER),
     Table("arch_study_trained_layer_split_speed", layer_split_speed, DOC),
     Table("arch_study_trained_architecture_speed", architecture_speed, DOC),
     Table("readme_trained_study", headline, "README.md")),
)
