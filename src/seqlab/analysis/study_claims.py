"""The study's verdicts by the rules fixed before its runs (docs/experiments/arch_study_trained.md): each
comparison is *better*, *worse*, *equivalent* or *inconclusive*; each published claim *agrees*, *disagrees*
or is *inconclusive*; and each early (300-update) answer *held* or *changed* at the trained budget. The rules
are fixed for the study's seeds (SEEDS against SEEDS): a comparison with fewer is *pending*, whatever its
numbers say.

With 3 seeds against 3 the permutation p cannot go below 0.10, so a difference is established by the
per-seed paired bootstrap tests on the test set together with the seed spread: B differs from A when every
seed's test gives p < 0.05 in the direction of the mean difference and the mean difference exceeds the seed
spread (more than twice the pooled seed sd). B is equivalent to A when it does not differ and the mean
difference is within EQUIVALENCE BLEU.

A question judged on training alone (the depth question: post-LN against pre-LN per learning rate and
warm-up setting, seqlab.analysis.study_tables.depth_fails) tests its claim by a failure rule (FailureClaim):
Xiong et al.'s claim agrees when post-LN without warm-up fails at one rate at least and, at each rate, fails
with warm-up only where it fails without (warm-up never hurts); it disagrees when post-LN without warm-up
fails at neither rate; otherwise it is inconclusive. Each question declares its claims
(seqlab.analysis.study_questions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from seqlab.analysis.study import SEEDS
from seqlab.metrics import keys as K

ALPHA = 0.05
EQUIVALENCE = 0.5  # BLEU: a difference this small, and not established, counts as none


def verdict(comparison: dict[str, Any]) -> str:
    """better | worse | equivalent | inconclusive, for the variant against its reference (BLEU); pending
    while the two share fewer than SEEDS seeds."""
    if len(comparison["seeds"]) < SEEDS:
        return "pending"
    delta = comparison["bleu"]["delta"]
    per_seed = [t for t in comparison["tests"] if t["metric"] == K.BLEU]
    same_way = bool(per_seed) and all(t["p_bootstrap"] < ALPHA and (t["delta"] > 0) == (delta > 0) for t in per_seed)
    if same_way and comparison["bleu"]["exceeds_spread"]:
        return "better" if delta > 0 else "worse"
    return "equivalent" if abs(delta) <= EQUIVALENCE else "inconclusive"


def verdict_cell(comparison: dict[str, Any], v: str) -> str:
    """Its Δ BLEU and verdict `v`, as the tables show them ("-2.36 (pending: 1 of 3 seeds)")."""
    seeds = f": {len(comparison['seeds'])} of {SEEDS} seeds" if v == "pending" else ""
    return f"{comparison['bleu']['delta']:+.2f} ({v}{seeds})"


def comparisons(summary: dict[str, Any], bucket: str | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    """(reference, variant) -> its comparison entry, over every decoded question of a study summary; with
    `bucket`, its comparison on that source-length bucket's sentences (seqlab.analysis.study_lengths)."""
    if bucket is not None:
        return {(c["reference"], c["variant"]): c["buckets"][bucket] for q in summary.values()
                for c in q.get("by_length", {}).get("comparisons", []) if bucket in c["buckets"]}
    return {(c["reference"], c["variant"]): c for q in summary.values() for c in q.get("comparisons", [])
            if "bleu" in c}


@dataclass(frozen=True)
class Claim:
    """A published claim and the comparison of its question that tests it."""

    claim: str
    source: str
    published: str
    pair: tuple[str, str]  # (reference, variant) as the question's table compares them
    agrees_when: tuple[str, ...]  # verdicts of the pair that agree with the claim
    disagrees_when: tuple[str, ...]
    bucket: str | None = None  # judged on one source-length bucket's sentences (K.LENGTH_BUCKETS' label)
    # a "worse" that still agrees when its drop is under half this pair's ("much less" than post-LN's drop)
    under_half_of: tuple[str, str] | None = None

    def agreement(self, found: dict[tuple[str, str], dict[str, Any]]) -> tuple[str, str] | None:
        """(verdict of its comparison, agrees | disagrees | inconclusive | pending), or None when the numbers
        lack it."""
        entry = found.get(self.pair)
        if entry is None:
            return None
        v = verdict(entry)
        if v == "worse" and self.under_half_of is not None:
            other = found.get(self.under_half_of)
            smaller = other is not None and abs(entry["bleu"]["delta"]) < abs(other["bleu"]["delta"]) / 2
            return v, "agrees" if smaller else "disagrees"
        if v == "pending":
            return v, v
        return v, ("agrees" if v in self.agrees_when else "disagrees" if v in self.disagrees_when
                   else "inconclusive")

    def row(self, numbers: dict[str, Any], variants: list[str]) -> str | None:
        """Its claims-table row from its question's numbers, or None when they lack its comparison."""
        found = comparisons({"": numbers}, self.bucket)
        result = self.agreement(found)
        if result is None:
            return None
        entry = found[self.pair]
        where = f" on {entry['n_sentences']} sources of {K.bucket_title(self.bucket)} tokens" if self.bucket else ""
        return (f"| {self.claim} | {self.source} | {self.published} | {self.pair[1]} − {self.pair[0]}{where}: "
                f"{verdict_cell(entry, result[0])} | {result[1]} |")


@dataclass(frozen=True)
class FailureClaim:
    """A claim judged on training by a failure rule (seqlab.analysis.study_tables.depth_fails): the variant
    without the remedy fails against its reference in one setting at least, and with the remedy it fails only
    where it also fails without (the remedy never hurts); it disagrees when the variant never fails without
    the remedy, and is inconclusive otherwise."""

    claim: str
    source: str
    published: str
    compared: str  # what the row says is compared, before the settings: "post-LN vs pre-LN at lr"
    remedy: str  # what the variant lacks in the first of each setting's pair: "warm-up"
    settings: dict[str, tuple[str, str]]  # setting -> (the failing variant without the remedy, with it)

    def agreement(self, numbers: dict[str, Any], variants: list[str]) -> tuple[str, str]:
        """(the failures per setting, agrees | disagrees | inconclusive | pending): pending until every run
        of the question is archived."""
        counts = [len(numbers.get("variants", {}).get(v, {}).get("seeds", [])) for v in variants]
        if any(n < SEEDS for n in counts):
            return f"pending: {sum(counts)} of {len(variants) * SEEDS} runs", "pending"
        fails = {c["post"]: c["fails"] for c in numbers["comparisons"]}
        without = [fails[bare] for bare, _ in self.settings.values()]
        with_ = [fails[remedied] for _, remedied in self.settings.values()]

        def yes(flags: list[bool]) -> str:
            return ", ".join(f"{s} {'fails' if f else 'no'}" for s, f in zip(self.settings, flags, strict=True))

        seen = f"{self.compared} {yes(without)} without {self.remedy}; {yes(with_)} with"
        if not any(without):
            return seen, "disagrees"
        hurts = any(w and not wo for w, wo in zip(with_, without, strict=True))
        return seen, "inconclusive" if hurts else "agrees"

    def row(self, numbers: dict[str, Any], variants: list[str]) -> str:
        seen, agrees = self.agreement(numbers, variants)
        return f"| {self.claim} | {self.source} | {self.published} | {seen} | {agrees} |"


def claims_markdown(rows: list[str]) -> str:
    """claim | source | published | seqlab's figure (Δ BLEU, verdict) | agrees?, over the rows of the claims
    the study has tested (each question's, `Claim.row`)."""
    return "\n".join(["| claim | source | published | seqlab's figure | agrees? |", "|---|---|---|---|---|", *rows]) \
        if rows else ""


def early_vs_trained(short: dict[str, Any], trained: dict[str, Any]) -> str:
    """Each comparison's verdict after 300 updates and at the trained budget: held or changed."""
    early, late = comparisons(short), comparisons(trained)
    lines = ["| comparison | 300 updates: Δ BLEU (verdict) | trained: Δ BLEU (verdict) | |", "|---|---|---|---|"]
    for pair in [p for p in early if p in late]:
        a, b = verdict(early[pair]), verdict(late[pair])
        lines.append(f"| {pair[1]} − {pair[0]} | {verdict_cell(early[pair], a)} | {verdict_cell(late[pair], b)} | "
                     f"{'pending' if 'pending' in (a, b) else 'held' if a == b else 'changed'} |")
    return "\n".join(lines) if len(lines) > 2 else ""
