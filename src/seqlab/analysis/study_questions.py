"""The study's questions, each declared as data: the variants it trains (seqlab.analysis.study.VARIANTS), the
pairs it tests, the function that makes its table from the archive, the published claims it tests and how its
validation curves are drawn. Nothing else names a question: the stages (seqlab.analysis.study_stages),
`seqlab study`, the pipelines' pages (pipelines/arch_study*.py) and the claims table read these fields, so a
new question is a variant or two and an entry here (docs/ARCHITECTURE.md walks through one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from seqlab.analysis.study import SEEDS, VARIANTS, Archived
from seqlab.analysis.study_claims import Claim, FailureClaim, claims_markdown, comparisons, verdict, verdict_cell
from seqlab.analysis.study_tables import Curves, TableFn, by_learning_rate, compared_table, curve_table, depth_table


@dataclass(frozen=True)
class Question:
    """One question: trained with SEEDS seeds per variant under each of its recipes, its table made by `table`
    once its runs are archived, its claims judged on that table's numbers."""

    title: str
    variants: list[str]  # in table order; the first is the reference of the depth question's failure rule
    pairs: list[tuple[str, str]]  # (reference, variant) pairs to test
    table: TableFn = compared_table  # (question, archive) -> (markdown, numbers)
    claims: tuple[Claim | FailureClaim, ...] = ()  # the published claims its numbers test
    curves: Curves | None = Curves()  # its own validation-curve figure (None: shown only with others')
    decoded: bool = True  # False: judged on validation loss alone, no test decoding
    by_length: bool = False  # also compared per source-length bucket (where position schemes are said to differ)
    recipes: tuple[str, ...] = ("short", "trained")
    seeds: int | None = None  # at most this many seeds (the curve: one run)
    # what its numbers say by the reading fixed before its runs, shown under its table: numbers -> markdown
    reading: Callable[[dict[str, Any]], str] | None = None

    @property
    def compared_on_test(self) -> bool:
        """Whether its table compares variants on test-set decodings: the curve run is decoded but compared
        with nothing, the depth question is judged on validation loss alone."""
        return self.decoded and bool(self.pairs)

    def runs(self) -> list[tuple[str, int]]:
        """Every (variant, seed) the question is complete with."""
        return [(v, s) for v in self.variants for s in range(min(SEEDS, self.seeds or SEEDS))]

    def numbers(self, archived: Archived) -> tuple[str, dict[str, Any]]:
        """Its table and numbers from the archive, and under the table its `reading` of them."""
        text, data = self.table(self, archived)
        if self.reading is not None and data.get("comparisons"):
            data["reading"] = self.reading(data)
            text += "\n\n" + data["reading"]
        return text, data

    def claim_rows(self, numbers: dict[str, Any]) -> list[str]:
        """The claims-table rows its numbers give (a claim whose comparison they lack gives none)."""
        return [row for claim in self.claims if (row := claim.row(numbers, self.variants)) is not None]


def _better(pair: tuple[str, str]) -> tuple[tuple[str, str], tuple[str, ...], tuple[str, ...]]:
    """A claim that the variant matches or beats its reference: (pair, agrees when, disagrees when)."""
    return pair, ("equivalent", "better"), ("worse",)


POSITIONS_GAP = 6.53  # BLEU: learned positions below sinusoidal ones at the trained budget, before these runs


def reading_verdicts(numbers: dict[str, Any], pairs: dict[str, tuple[str, str]]
                     ) -> tuple[dict[tuple[str, str], dict], dict[str, str] | None, str]:
    """A reading's comparisons, each pair's verdict by the study's rule (None while one is missing or pending),
    and the line that shows them ("variant − reference: +0.30 (equivalent); ...")."""
    found = comparisons({"": numbers})
    if any(pair not in found for pair in pairs.values()):
        return found, None, "a comparison of the reading is missing"
    v = {name: verdict(found[pair]) for name, pair in pairs.items()}
    seen = "; ".join(f"{found[pair]['variant']} − {found[pair]['reference']}: {verdict_cell(found[pair], v[name])}"
                     for name, pair in pairs.items())
    return found, None if "pending" in v.values() else v, seen


def learned_positions_cause(numbers: dict[str, Any]) -> str:
    """Which cause of the learned positions' loss the runs support, by the reading fixed before them
    (docs/experiments/arch_study_trained.md): *scale* when learned positions started at the tokens' scale are
    not worse than the baseline, or beat the old learned ones by more than half POSITIONS_GAP, and without the
    embedding scale learned positions are not worse than sinusoidal ones; *structure* when learned positions
    started at the sinusoids are not worse than the baseline while the scaled start stays worse; *neither*
    when every learned variant is worse than its sinusoidal reference. Each comparison's verdict is the
    study's rule (seqlab.analysis.study_claims.verdict); "not worse" is equivalent or better."""
    pairs = {"unit": ("baseline", "learned_unit_init"), "sinusoid": ("baseline", "learned_sinusoid_init"),
             "unit_vs_learned": ("learned_positions", "learned_unit_init"),
             "noscale": ("sinusoidal_noscale", "learned_noscale")}
    found, v, seen = reading_verdicts(numbers, pairs)
    if v is None:
        return f"_Which cause the runs support: pending ({seen})._"
    not_worse = {name: v[name] in ("equivalent", "better") for name in v}
    big_gain = v["unit_vs_learned"] == "better" and found[pairs["unit_vs_learned"]]["bleu"]["delta"] > POSITIONS_GAP / 2
    causes = [name for name, holds in (
        ("scale", (not_worse["unit"] or big_gain) and not_worse["noscale"]),
        ("structure", not_worse["sinusoid"] and v["unit"] == "worse")) if holds]
    if not causes:
        causes = ["neither"] if all(v[n] == "worse" for n in ("unit", "sinusoid", "noscale")) else []
    found_text = " and ".join(f"*{c}*" for c in causes) or "none of the outcomes named before the runs"
    return f"**Which cause the runs support**, by the reading fixed before them: {found_text} ({seen})."


def swiglu_rate_reading(numbers: dict[str, Any]) -> str:
    """What the lower peak rate says of SwiGLU's late fall, by the reading fixed before its runs
    (docs/experiments/arch_study_trained.md): *the late rate* when SwiGLU at half the peak rate beats SwiGLU at the
    recipe's rate; *not the rate* when it is equivalent or worse, which leaves the other reading (the gated layer
    fits the small training set faster and generalizes worse) for the records' training-loss curves to tell;
    neither when that comparison is inconclusive.
    Whether the lower rate also reaches the baseline is said beside it. Each verdict is the study's rule."""
    _, v, seen = reading_verdicts(numbers, {"rate": ("swiglu", "swiglu_low_lr"), "gap": ("baseline", "swiglu_low_lr")})
    if v is None:
        return f"_What the lower rate says: pending ({seen})._"
    cause = ("*the late rate*" if v["rate"] == "better" else "*not the rate*" if v["rate"] in ("equivalent", "worse")
             else "neither reading settled (the lower rate against SwiGLU inconclusive)")
    reach = ("and at that rate SwiGLU is not worse than the baseline" if v["gap"] in ("equivalent", "better")
             else "and at that rate SwiGLU stays behind the baseline" if v["gap"] == "worse"
             else "against the baseline inconclusive")
    return f"**What the lower rate says**, by the reading fixed before its runs: {cause}, {reach} ({seen})."


_DEPTH_VARIANTS = [v for v in VARIANTS if v.startswith("deep_")]
_DEPTH_RATES = ("1e-3", "2e-3")

# in the order the trained recipe runs them (make study-trained, the pipeline's stages) and the claims list them
QUESTIONS: dict[str, Question] = {
    "curve": Question("The baseline's validation curve to 6,300 updates (chooses the trained budget)", ["curve"],
                      [], table=curve_table, curves=None, recipes=("trained",), seeds=1),
    "norm_warmup": Question(
        "Post-LN vs pre-LN, with and without warm-up", ["baseline", "post_nowarmup", "pre", "pre_nowarmup"],
        [("baseline", "post_nowarmup"), ("pre", "pre_nowarmup"), ("baseline", "pre"),
         ("post_nowarmup", "pre_nowarmup")],
        claims=(Claim("Post-LN needs warm-up", "Xiong et al. 2020", "warm-up crucial to Post-LN's final performance",
                      ("baseline", "post_nowarmup"), ("worse",), ("equivalent", "better")),
                Claim("Pre-LN trains without warm-up", "Xiong et al. 2020", "comparable results without warm-up",
                      ("pre", "pre_nowarmup"), ("equivalent", "better"), (),
                      under_half_of=("baseline", "post_nowarmup"))),
        curves=None),
    "tying": Question(
        "Tied embeddings: none / decoder / all", ["baseline", "tie_decoder", "tie_none"],
        [("baseline", "tie_decoder"), ("baseline", "tie_none")],
        claims=(Claim("Tying all embeddings costs no quality", "Press & Wolf 2017", "no loss at under half the size",
                      ("baseline", "tie_none"), ("equivalent", "worse"), ("better",)),),  # untied better: it costs
        curves=None),
    "positions": Question(
        "Sinusoidal vs learned positions", ["baseline", "learned_positions"], [("baseline", "learned_positions")],
        claims=(Claim("Learned and sinusoidal positions give nearly identical results",
                      "Vaswani et al. 2017, Table 3 row (E)", "BLEU 25.7 learned vs 25.8 sinusoidal",
                      *_better(("baseline", "learned_positions"))),),
        curves=None, by_length=True),
    "depth": Question(
        "6+6 layers, 1,000 updates: does post-LN need warm-up where pre-LN does not?", _DEPTH_VARIANTS,
        [(f"deep_pre_{w}_lr{lr}", f"deep_post_{w}_lr{lr}") for w in ("warmup", "nowarmup") for lr in _DEPTH_RATES],
        table=depth_table,
        claims=(FailureClaim("Post-LN without warm-up fails where pre-LN does not, and more so deeper and at larger "
                             "rates", "Xiong et al. 2020", "Post-LN training unstable without warm-up",
                             "post-LN vs pre-LN at lr", "warm-up",
                             {lr: (f"deep_post_nowarmup_lr{lr}", f"deep_post_warmup_lr{lr}") for lr in _DEPTH_RATES}),),
        curves=Curves("Validation loss of the depth runs, mean and range over seeds, a panel per learning rate",
                      by_learning_rate),
        decoded=False, recipes=("trained",)),
    "relative_positions": Question(
        "Sinusoidal vs relative positions (RoPE, ALiBi, T5's bias)",
        ["baseline", "learned_positions", "rope_positions", "alibi_positions", "t5_positions"],
        [("baseline", v) for v in ("rope_positions", "alibi_positions", "t5_positions")],
        claims=(Claim("RoPE matches or beats absolute positions", "Su et al. 2021",
                      "better than sinusoidal in their settings", *_better(("baseline", "rope_positions"))),
                Claim("ALiBi matches sinusoidal positions at the training length", "Press et al. 2022",
                      "matches sinusoidal at the training length", *_better(("baseline", "alibi_positions"))),
                Claim("ALiBi holds up on long inputs", "Press et al. 2022",
                      "better than sinusoidal beyond the training length", *_better(("baseline", "alibi_positions")),
                      bucket="src_gt64"),
                Claim("T5's bucketed bias serves as the only position signal", "Raffel et al. 2020",
                      "used throughout T5", *_better(("baseline", "t5_positions")))),
        by_length=True, recipes=("trained",)),
    # judged on quality here; its decoding speed is measured apart on a quiet machine (the pipeline's stage)
    "layer_split": Question(
        "3+3 layers vs a deep encoder with a shallow decoder (5+1) and the reverse (1+5)",
        ["baseline", "enc5_dec1", "enc1_dec5"], [("baseline", "enc5_dec1"), ("baseline", "enc1_dec5")],
        claims=(Claim("A deep encoder with a one-layer decoder keeps the balanced model's accuracy",
                      "Kasai et al. 2021", "12-1 layers on par with 6-6 in BLEU, decoding faster",
                      *_better(("baseline", "enc5_dec1"))),),
        recipes=("trained",)),
    "learned_positions_why": Question(
        "Why learned positions lose: starting scale, starting structure, embedding scale",
        ["baseline", "learned_positions", "learned_unit_init", "learned_sinusoid_init", "sinusoidal_noscale",
         "learned_noscale"],
        [("baseline", "learned_unit_init"), ("baseline", "learned_sinusoid_init"),
         ("learned_positions", "learned_unit_init"), ("learned_positions", "learned_sinusoid_init"),
         ("sinusoidal_noscale", "learned_noscale")], reading=learned_positions_cause, recipes=("trained",)),
    "modern_recipe": Question(
        "RMSNorm, SwiGLU, no biases, and all of them with pre-LN and RoPE",
        ["baseline", "rmsnorm", "swiglu", "no_bias", "modern"],
        [("baseline", v) for v in ("rmsnorm", "swiglu", "no_bias", "modern")],
        claims=(Claim("RMSNorm matches LayerNorm in machine translation", "Zhang & Sennrich 2019",
                      "comparable BLEU to LayerNorm, faster", *_better(("baseline", "rmsnorm"))),
                Claim("A GLU feed-forward (SwiGLU) beats ReLU at equal parameters", "Shazeer 2020",
                      "lower perplexity than ReLU at equal parameters", ("baseline", "swiglu"), ("better",),
                      ("worse",)),
                Claim("Most Transformer modifications do not transfer", "Narang et al. 2021",
                      "few changes improve on the original across tasks", ("baseline", "modern"),
                      ("equivalent", "worse"), ("better",))),
        recipes=("trained",)),
    # judged on quality here; decoding speed against the baseline is measured apart on a quiet machine
    "architecture": Question(
        "Encoder-decoder, decoder-only LM or prefix LM, at equal parameters",
        ["baseline", "decoder_only", "prefix_lm"], [("baseline", "decoder_only"), ("baseline", "prefix_lm")],
        claims=(Claim("A prefix LM matches the encoder-decoder at equal parameters", "Raffel et al. 2020",
                      "EnDe BLEU 26.28 (prefix LM) vs 26.27 (encoder-decoder), LM objective, Table 2",
                      *_better(("baseline", "prefix_lm"))),
                Claim("A decoder-only LM trails the encoder-decoder at equal parameters", "Raffel et al. 2020",
                      "EnDe BLEU 25.23 (LM) vs 26.27, Table 2", ("baseline", "decoder_only"), ("worse",),
                      ("equivalent", "better")),
                Claim("A concatenated-input decoder-only LM is on par with the encoder-decoder", "Gao et al. 2022",
                      "on par in BLEU on supervised MT", *_better(("baseline", "decoder_only")))),
        by_length=True, recipes=("trained",)),
    # a loose end of the modern recipe, queued after the architecture question
    "swiglu_rate": Question(
        "SwiGLU's late fall: the gated layer at half the peak rate", ["baseline", "swiglu", "swiglu_low_lr"],
        [("swiglu", "swiglu_low_lr"), ("baseline", "swiglu_low_lr")], reading=swiglu_rate_reading,
        recipes=("trained",)),
}
STUDY = ("norm_warmup", "tying", "positions")  # `seqlab study all`: the design questions


def claims_table(numbers: dict[str, dict[str, Any]]) -> str:
    """claim | source | published | seqlab's figure | agrees?, for every claim of the questions in `numbers`
    (question -> its table's numbers), in the questions' order."""
    return claims_markdown([row for name, q in QUESTIONS.items() if name in numbers
                            for row in q.claim_rows(numbers[name])])
