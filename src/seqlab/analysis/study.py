"""The architecture study's variants, recipes and archive (its questions: seqlab.analysis.study_questions;
its tables: seqlab.analysis.study_tables).

The study is a pipeline (seqlab.analysis.study_stages, run by seqlab.app.runner): every variant of a
question trained with several seeds, the test split decoded with each of its recipe's settings. Each stage
becomes one archive record the moment it finishes: `<variant>-seed<N>.json` (the validation curve, the
parameter count, the model, the training's provenance) and `<variant>-seed<N>.<label>.json` (test metrics,
the decoding's provenance, its hypotheses in `.hyps.txt.gz`); no checkpoints. The archive is small enough to
commit, and it alone rebuilds the tables:
one per question, mean +- sd over seeds, each seed's value, the difference to the question's reference
with its seed-level test (seqlab.metrics.seeds) and the per-seed paired bootstrap on the test set
(seqlab.analysis.compare).
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqlab.io import read_lines_gz
from seqlab.tracking.results import OK

RUN = re.compile(r"^(?P<variant>.+)-seed(?P<seed>\d+)$")
RECORD = re.compile(r"^(?P<run>.+-seed\d+)(\.(?P<label>[\w.]+))?\.json$")  # a training's, or a decoding's
REFERENCES = "test.references.txt.gz"
SOURCE_TOKENS = "test.source_tokens.txt.gz"  # each test source's subword tokens as decoded: the length buckets
TRAINING = "training"  # the label of a record with no decoding (a question judged on validation loss)


@dataclass(frozen=True)
class Recipe:
    """A training budget of the study: its experiment file, where it runs and where its archive lives."""

    name: str
    experiment: str  # conf/experiment/<experiment>.yaml
    archive: Path  # the records (results/: committed)
    decodings: dict[str, str]  # archive label -> `decoding=` preset, the reported one first


RECIPES: dict[str, Recipe] = {
    "short": Recipe("short", "arch_study", Path("results/arch_study"), {"greedy": "greedy"}),
    "trained": Recipe("trained", "arch_study_trained", Path("results/arch_study_trained"),
                      {"beam5": "beam", "greedy": "greedy"}),
}

# variant -> its training overrides (the baseline: the experiment's default model); every question's
# variants come from here, for the stages (seqlab.analysis.study_stages) and for the tables
VARIANTS: dict[str, tuple[str, ...]] = {
    "baseline": (),
    "post_nowarmup": ("optim.warmup_ramp=false",),
    "pre": ("model.norm_position=pre",),
    "pre_nowarmup": ("model.norm_position=pre", "optim.warmup_ramp=false"),
    "tie_none": ("model.tie_embeddings=none",),
    "tie_decoder": ("model.tie_embeddings=decoder",),
    "learned_positions": ("model.positions=learned",),
    "rope_positions": ("model.positions=rope",),
    "alibi_positions": ("model.positions=alibi",),
    "t5_positions": ("model.positions=t5",),
    # the baseline's 3+3 layers split another way (Kasai et al. 2021): deep encoder + one decoder layer, and back
    "enc5_dec1": ("model.encoder_layers=5", "model.decoder_layers=1"),
    "enc1_dec5": ("model.encoder_layers=1", "model.decoder_layers=5"),
    # why learned positions lose: their starting scale, their starting structure, the embedding scale
    "learned_unit_init": ("model.positions=learned", "model.position_init=unit"),
    "learned_sinusoid_init": ("model.positions=learned", "model.position_init=sinusoid"),
    "learned_noscale": ("model.positions=learned", "model.scale_embedding=false"),
    "sinusoidal_noscale": ("model.scale_embedding=false",),
    # the modern recipe (Zhang & Sennrich 2019; Shazeer 2020; Narang et al. 2021); SwiGLU at equal parameters:
    # three d x d_ff matrices for two, d_ff 1,024 x 2/3
    "rmsnorm": ("model.norm=rmsnorm",),
    "swiglu": ("model.activation=silu", "model.gated_ffn=true", "model.d_ff=683"),
    "no_bias": ("model.bias=false",),
    # SwiGLU's late fall (the modern recipe's table): the same model at half the recipe's peak rate
    "swiglu_low_lr": ("model.activation=silu", "model.gated_ffn=true", "model.d_ff=683", "optim.lr=0.0005"),
    "modern": ("model.norm=rmsnorm", "model.activation=silu", "model.gated_ffn=true", "model.d_ff=683",
               "model.bias=false", "model.norm_position=pre", "model.positions=rope"),
    # the architecture question (Raffel et al. 2020; Zhang et al. 2022; Gao et al. 2022): one stack of 6 layers over
    # source, BOS and target at the 3+3 model's parameter count (d_ff 1,281: 7,577,606 against 7,577,600), the
    # loss on the target; decoder-only attends causally, the prefix LM's source part to all of itself
    "decoder_only": ("model.architecture=decoder_only", "model.encoder_layers=0", "model.decoder_layers=6",
                     "model.d_ff=1281"),
    "prefix_lm": ("model.architecture=prefix_lm", "model.encoder_layers=0", "model.decoder_layers=6",
                  "model.d_ff=1281"),
    # the trained recipe's budget comes from this run's validation curve (curve_budget)
    "curve": ("trainer.max_steps=6300",),
}
DEEP = ("model.encoder_layers=6", "model.decoder_layers=6", "trainer.max_steps=1000")
for _norm in ("post", "pre"):
    for _warm, _warm_override in (("warmup", ()), ("nowarmup", ("optim.warmup_ramp=false",))):
        for _lr in ("1e-3", "2e-3"):
            VARIANTS[f"deep_{_norm}_{_warm}_lr{_lr}"] = (*DEEP, f"model.norm_position={_norm}", *_warm_override,
                                                        f"optim.lr={float(_lr)}")


SEEDS = 3  # training seeds per variant: the verdicts' rules (seqlab.analysis.study_claims) are fixed for 3 against 3
VARIANT_DESCRIPTIONS = {
    "baseline": "post-LN, warm-up, sinusoidal, tie all", "post_nowarmup": "post-LN, no warm-up",
    "pre": "pre-LN, warm-up", "pre_nowarmup": "pre-LN, no warm-up", "tie_decoder": "tie decoder in/out only",
    "tie_none": "no tying", "learned_positions": "learned positions", "curve": "baseline, 6,300 updates",
    "rope_positions": "RoPE", "alibi_positions": "ALiBi, symmetric in the encoder", "t5_positions": "T5 bias",
    "enc5_dec1": "5 encoder + 1 decoder layers", "enc1_dec5": "1 encoder + 5 decoder layers",
    "learned_unit_init": "learned positions from N(0, 1)",
    "learned_sinusoid_init": "learned positions from sinusoids",
    "learned_noscale": "learned positions, embeddings unscaled",
    "sinusoidal_noscale": "sinusoidal, embeddings unscaled",
    "rmsnorm": "RMSNorm", "swiglu": "SwiGLU, d_ff 683", "no_bias": "no biases",
    "swiglu_low_lr": "SwiGLU, d_ff 683, peak rate 5e-4",
    "modern": "pre-RMSNorm, SwiGLU, no biases, RoPE",
    "decoder_only": "decoder-only LM, 6 layers", "prefix_lm": "prefix LM, 6 layers",
}
# the grid (`seqlab study --grid`, `make sweep-arch`): every combination of these
GRID: dict[str, tuple[str, ...]] = {"model.norm_position": ("pre", "post"),
                                    "model.positions": ("sinusoidal", "learned"),
                                    "model.tie_embeddings": ("none", "decoder", "all")}
CURVE_TOLERANCE = 0.02  # nats: the trained budget is the first validation this close to the curve's lowest


@dataclass
class Record:
    """One archived (run, decoding) pair: a variant trained with one seed, decoded on the test split."""

    variant: str
    seed: int
    label: str  # the decoding's archive label (beam5, greedy), or TRAINING
    metrics: dict[str, Any]
    val_curve: list[tuple[int, float]]
    params: int
    steps: int
    model: dict[str, Any]
    status: str = OK
    training: dict[str, Any] | None = None  # seqlab.provenance.Provenance of the training
    evaluation: dict[str, Any] | None = None  # ... and of the decoding
    hypotheses: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.variant}-seed{self.seed}"

    @property
    def final_val_loss(self) -> float:
        return self.val_curve[-1][1] if self.val_curve else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {"variant": self.variant, "seed": self.seed, "label": self.label, "status": self.status,
                "metrics": self.metrics, "val_curve": self.val_curve, "params": self.params, "steps": self.steps,
                "model": self.model, "training": self.training, "evaluation": self.evaluation}


def load_records(archive: Path, label: str) -> dict[tuple[str, int], Record]:
    """Every run's record for one decoding label, its training record's curve, model and provenance joined
    in (TRAINING: every run's training record, decoded or not). The archive holds the study's stages as the
    pipeline runner archives them (seqlab.analysis.study_stages): `<run>.json` for a training,
    `<run>.<label>.json` for a decoding, its hypotheses in the file its record names."""
    runs: dict[tuple[str, int], Record] = {}
    for path in sorted(archive.glob("*-seed*.json")):
        match = RECORD.match(path.name)
        if not match or match["label"] != (None if label == TRAINING else label):
            continue
        run = RUN.match(match["run"])
        assert run is not None  # RECORD's run ends in -seed<N>
        train = json.loads((archive / f"{match['run']}.json").read_text())
        trained = train["result"]
        metrics, evaluation, hyps = {}, None, []
        if label != TRAINING:
            decoded = json.loads(path.read_text())
            metrics, evaluation = decoded["result"]["metrics"], decoded["manifest"]
            hyps = read_lines_gz(archive / decoded["result"]["outputs"]["hypotheses"])
        runs[(run["variant"], int(run["seed"]))] = Record(
            run["variant"], int(run["seed"]), label, metrics, [tuple(x) for x in trained["val_curve"]],
            trained["params"], trained["steps"], trained["model"], train["status"], train["manifest"], evaluation,
            hyps)
    return runs


def load_references(archive: Path) -> list[str]:
    return gzip.decompress((archive / REFERENCES).read_bytes()).decode().rstrip("\n").split("\n")


def load_source_tokens(archive: Path) -> list[int] | None:
    """Each test source's length in subword tokens, or None for an archive that lacks them."""
    path = archive / SOURCE_TOKENS
    if not path.is_file():
        return None
    return [int(x) for x in gzip.decompress(path.read_bytes()).decode().split()]


Runs = dict[tuple[str, int], Record]  # (variant, seed) -> its record


@dataclass(frozen=True)
class Archived:
    """What a question's table reads from an archive: one decoding's records (`decoded`), every run's
    training record (`training`: decoded runs too), the test references and each source's length in
    subword tokens (None where the archive lacks them)."""

    decoded: Runs
    training: Runs
    references: list[str]
    source_tokens: list[int] | None

    @classmethod
    def load(cls, archive: Path, label: str) -> Archived:
        decoded = load_records(archive, label)
        references = load_references(archive) if (archive / REFERENCES).is_file() else []
        return cls(decoded, load_records(archive, TRAINING), references, load_source_tokens(archive))


def curve_budget(curve: list[tuple[int, float]], tolerance: float = CURVE_TOLERANCE) -> int:
    """The first validation step whose loss is within `tolerance` nats of the curve's lowest."""
    lowest = min(loss for _, loss in curve)
    return next(step for step, loss in curve if loss <= lowest + tolerance)
