"""The study's verdicts follow the rules fixed before its runs: a difference needs every seed's paired test
(p < 0.05, same direction) and a gap beyond the seed spread; equivalence is within 0.5 BLEU; with fewer seeds
than the rules are fixed for, every verdict is pending."""

from __future__ import annotations

from seqlab.analysis.study import Archived, Record
from seqlab.analysis.study_claims import early_vs_trained, verdict
from seqlab.analysis.study_questions import QUESTIONS, claims_table

CLAIMS = [c for q in QUESTIONS.values() for c in q.claims if hasattr(c, "pair")]  # those judged on a comparison


def entry(ref: str, variant: str, delta: float, exceeds: bool, seeds: list[tuple[float, float]]) -> dict:
    """A comparison as the study's summary holds it: seed-level BLEU delta and per-seed (delta, p)."""
    return {"reference": ref, "variant": variant, "seeds": list(range(len(seeds))),
            "bleu": {"delta": delta, "exceeds_spread": exceeds},
            "tests": [{"metric": "bleu", "delta": d, "p_bootstrap": p} for d, p in seeds]
            + [{"metric": "chrf", "delta": -d, "p_bootstrap": 0.9} for d, _ in seeds]}


def test_a_difference_needs_every_seed_and_the_spread():
    assert verdict(entry("a", "b", 2.0, True, [(2.1, 0.001), (1.8, 0.01), (2.2, 0.002)])) == "better"
    assert verdict(entry("a", "b", -2.0, True, [(-2.1, 0.001), (-1.8, 0.01), (-2.2, 0.002)])) == "worse"
    assert verdict(entry("a", "b", 2.0, True, [(2.1, 0.001), (1.8, 0.2), (2.2, 0.002)])) == "inconclusive"
    assert verdict(entry("a", "b", 2.0, False, [(2.1, 0.001), (1.8, 0.01), (2.2, 0.002)])) == "inconclusive"
    assert verdict(entry("a", "b", 0.4, True, [(0.5, 0.01), (-0.1, 0.04), (0.8, 0.001)])) == "equivalent"
    assert verdict(entry("a", "b", 0.3, True, [(0.3, 0.01), (0.2, 0.01), (0.4, 0.01)])) == "better"


def test_claims_agree_by_direction_and_pre_ln_by_half_the_drop():
    summary = {"norm_warmup": {"comparisons": [
        entry("baseline", "post_nowarmup", -4.0, True, [(-4, 0.001)] * 3),
        entry("pre", "pre_nowarmup", -1.5, True, [(-1.5, 0.001)] * 3)]},
        "positions": {"comparisons": [entry("baseline", "learned_positions", 0.2, False, [(0.2, 0.3)] * 3)]},
        "tying": {"comparisons": [entry("baseline", "tie_none", 1.5, True, [(1.5, 0.001)] * 3)]}}
    found = {(c["reference"], c["variant"]): c for q in summary.values() for c in q["comparisons"]}
    by_pair = {c.pair: c.agreement(found) for c in CLAIMS if not c.bucket}
    assert by_pair[("baseline", "post_nowarmup")] == ("worse", "agrees")
    assert by_pair[("pre", "pre_nowarmup")] == ("worse", "agrees")  # 1.5 < 4.0 / 2
    assert by_pair[("baseline", "learned_positions")] == ("equivalent", "agrees")
    assert by_pair[("baseline", "tie_none")] == ("better", "disagrees")  # untied better: tying cost quality
    assert by_pair[("baseline", "rope_positions")] is None
    table = claims_table(summary)
    assert table.count("\n") == 1 + 4 and "| Post-LN needs warm-up | Xiong et al. 2020 |" in table


def test_early_answers_held_or_changed():
    short = {"tying": {"comparisons": [entry("baseline", "tie_none", 0.25, False, [(0.25, 0.03)] * 3)]}}
    trained = {"tying": {"comparisons": [entry("baseline", "tie_none", -2.0, True, [(-2.0, 0.001)] * 3)]}}
    assert "| tie_none − baseline | +0.25 (equivalent) | -2.00 (worse) | changed |" in early_vs_trained(short, trained)
    assert early_vs_trained(short, {}) == ""


def test_fewer_seeds_than_the_rules_assume_give_no_verdict():
    one = entry("baseline", "post_nowarmup", -6.8, False, [(-6.8, 0.001)])  # seed 0 alone: p and gap say nothing
    assert verdict(one) == "pending"
    assert verdict(entry("pre", "pre_nowarmup", 0.35, False, [(0.35, 0.11)] * 2)) == "pending"  # not "equivalent"
    table = claims_table({"norm_warmup": {"comparisons": [one]}})
    assert "| post_nowarmup − baseline: -6.80 (pending: 1 of 3 seeds) | pending |" in table
    short = {"norm_warmup": {"comparisons": [entry("baseline", "post_nowarmup", -1.6, True, [(-1.6, 0.001)] * 3)]}}
    assert "| -1.60 (worse) | -6.80 (pending: 1 of 3 seeds) | pending |" in early_vs_trained(
        short, {"norm_warmup": {"comparisons": [one]}})


def test_the_depth_claim_by_the_failure_rule_per_setting():
    question = QUESTIONS["depth"]
    (claim,) = question.claims

    def depth_agreement(numbers: dict) -> tuple[str, str]:
        return claim.agreement(numbers, question.variants)

    def depth(post_loss: dict[str, float], seeds: int = 3) -> dict:
        """The depth question's numbers: pre-LN at 4.0 everywhere, post-LN at `post_loss[setting]` (4.0 unless
        given), seeds 0.01 apart."""
        runs = {}
        for v in question.variants:
            base = post_loss.get(v.removeprefix("deep_post_"), 4.0) if v.startswith("deep_post_") else 4.0
            for s in range(seeds):
                runs[(v, s)] = Record(v, s, "training", {}, [(900, base + s / 100)], 0, 1000, {})
        return question.numbers(Archived({}, runs, [], None))[1]

    seen, agrees = depth_agreement(depth({"nowarmup_lr2e-3": 6.5}))
    assert agrees == "agrees"
    assert seen == "post-LN vs pre-LN at lr 1e-3 no, 2e-3 fails without warm-up; 1e-3 no, 2e-3 no with"
    assert depth_agreement(depth({}))[1] == "disagrees"  # level everywhere: post-LN never fails
    assert depth_agreement(depth({"nowarmup_lr1e-3": 6.5, "warmup_lr2e-3": 6.5}))[1] == "inconclusive"
    assert depth_agreement(depth({"nowarmup_lr2e-3": 6.5, "warmup_lr2e-3": 6.5}))[1] == "agrees"
    assert depth_agreement(depth({"nowarmup_lr2e-3": 6.5}, seeds=2)) == ("pending: 16 of 24 runs", "pending")
    row = claims_table({"depth": depth({"nowarmup_lr1e-3": 6.5, "nowarmup_lr2e-3": 7.0})}).splitlines()[-1]
    assert row.startswith("| Post-LN without warm-up fails where pre-LN does not") and row.endswith("| agrees |")


def test_alibis_long_input_claim_is_judged_on_the_longest_buckets_sentences_alone():
    overall = entry("baseline", "alibi_positions", 0.3, False, [(0.3, 0.4)] * 3)
    longest = {**entry("baseline", "alibi_positions", -6.0, True, [(-6.0, 0.01)] * 3), "n_sentences": 16}
    shortest = {**entry("baseline", "alibi_positions", 4.0, True, [(4.0, 0.01)] * 3), "n_sentences": 105}
    summary = {"relative_positions": {"comparisons": [overall], "by_length": {"comparisons": [
        {"reference": "baseline", "variant": "alibi_positions",
         "buckets": {"src_gt64": longest, "src_le16": shortest}}]}}}
    rows = [r for r in claims_table(summary).splitlines() if "ALiBi" in r]
    assert len(rows) == 2
    assert "alibi_positions − baseline: +0.30 (equivalent) | agrees |" in rows[0]
    assert rows[1].endswith("alibi_positions − baseline on 16 sources of > 64 tokens: -6.00 (worse) | disagrees |")
    del summary["relative_positions"]["by_length"]  # an archive without source lengths: no such row
    assert [r for r in claims_table(summary).splitlines() if "ALiBi" in r] == rows[:1]


def test_the_learned_positions_question_reads_its_cause_by_the_rule_fixed_before_its_runs():
    from seqlab.analysis.study_questions import learned_positions_cause

    def numbers(unit: tuple, sinusoid: tuple, unit_vs_learned: tuple, noscale: tuple) -> dict:
        """Each comparison as (delta, established): established gives every seed p 0.001 and a gap beyond
        the spread, else p 0.4 and none."""
        def one(ref, variant, delta, established):
            return entry(ref, variant, delta, established, [(delta, 0.001 if established else 0.4)] * 3)
        return {"comparisons": [one("baseline", "learned_unit_init", *unit),
                                one("baseline", "learned_sinusoid_init", *sinusoid),
                                one("learned_positions", "learned_unit_init", *unit_vs_learned),
                                one("sinusoidal_noscale", "learned_noscale", *noscale)]}

    scale = learned_positions_cause(numbers((0.3, False), (-2.0, True), (6.8, True), (0.2, False)))
    assert "*scale*" in scale and "*structure*" not in scale
    assert "learned_unit_init − baseline: +0.30 (equivalent)" in scale
    # worse than the baseline, but past half the old gap over the old learned positions: still the scale
    assert "*scale*" in learned_positions_cause(numbers((-1.5, True), (-2.0, True), (4.0, True), (0.1, False)))
    structure = learned_positions_cause(numbers((-3.0, True), (0.2, False), (3.0, True), (-2.0, True)))
    assert "*structure*" in structure and "*scale*" not in structure
    neither = learned_positions_cause(numbers((-3.0, True), (-2.5, True), (3.0, True), (-2.0, True)))
    assert "*neither*" in neither
    unnamed = learned_positions_cause(numbers((-3.0, True), (-1.5, False), (3.0, True), (-2.0, True)))
    assert "none of the outcomes named before the runs" in unnamed  # sinusoid start inconclusive
    one_seed = {"comparisons": [entry("baseline", "learned_unit_init", 0.5, False, [(0.5, 0.05)])]}
    assert "pending" in learned_positions_cause(one_seed)


def test_the_swiglu_rate_reading_names_the_outcome_fixed_before_the_runs():
    from seqlab.analysis.study_questions import swiglu_rate_reading

    def numbers(rate: tuple, gap: tuple) -> dict:
        def one(ref, variant, delta, established):
            return entry(ref, variant, delta, established, [(delta, 0.001 if established else 0.4)] * 3)
        return {"comparisons": [one("swiglu", "swiglu_low_lr", *rate), one("baseline", "swiglu_low_lr", *gap)]}

    rate = swiglu_rate_reading(numbers((1.5, True), (0.1, False)))
    assert "*the late rate*" in rate and "not worse than the baseline" in rate
    assert "swiglu_low_lr − swiglu: +1.50 (better)" in rate
    behind = swiglu_rate_reading(numbers((1.5, True), (-1.6, True)))
    assert "*the late rate*" in behind and "stays behind the baseline" in behind
    assert "*not the rate*" in swiglu_rate_reading(numbers((0.2, False), (-1.4, True)))
    assert "*not the rate*" in swiglu_rate_reading(numbers((-1.2, True), (-2.6, True)))
    assert "neither reading settled" in swiglu_rate_reading(numbers((1.2, False), (-0.3, False)))
    assert "pending" in swiglu_rate_reading({"comparisons": [entry("swiglu", "swiglu_low_lr", 0.5, False,
                                                                   [(0.5, 0.05)])]})
