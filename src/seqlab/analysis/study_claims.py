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

The depth question is judged on training alone, post-LN against pre-LN per learning rate and warm-up setting
(seqlab.analysis.study_tables.depth_fails). Xiong et al.'s claim agrees when post-LN without warm-up fails at
one rate at least and, at each rate, fails with warm-up only where it fails without (warm-up never hurts); it
disagrees when post-LN without warm-up fails at neither rate; otherwise it is inconclusive.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqlab.analysis.study import QUESTIONS, SEEDS
from seqlab.io import atomic_write_text
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
    """A published claim and the comparison that tests it."""

    claim: str
    source: str
    published: str
    pair: tuple[str, str]  # (reference, variant) as the study's tables compare them
    agrees_when: tuple[str, ...]  # verdicts of the pair that agree with the claim
    disagrees_when: tuple[str, ...]
    bucket: str | None = None  # judged on one source-length bucket's sentences (K.LENGTH_BUCKETS' label)


CLAIMS = (
    Claim("Learned and sinusoidal positions give nearly identical results",
          "Vaswani et al. 2017, Table 3 row (E)", "BLEU 25.7 learned vs 25.8 sinusoidal",
          ("baseline", "learned_positions"), ("equivalent", "better"), ("worse",)),
    Claim("Tying all embeddings costs no quality", "Press & Wolf 2017", "no loss at under half the size",
          ("baseline", "tie_none"), ("equivalent", "worse"), ("better",)),  # untied better = tying costs
    Claim("Post-LN needs warm-up", "Xiong et al. 2020", "warm-up crucial to Post-LN's final performance",
          ("baseline", "post_nowarmup"), ("worse",), ("equivalent", "better")),
    Claim("Pre-LN trains without warm-up", "Xiong et al. 2020", "comparable results without warm-up",
          ("pre", "pre_nowarmup"), ("equivalent", "better"), ()),  # "worse": see pre_ln_agrees
    Claim("RoPE matches or beats absolute positions", "Su et al. 2021", "better than sinusoidal in their settings",
          ("baseline", "rope_positions"), ("equivalent", "better"), ("worse",)),
    Claim("ALiBi matches sinusoidal positions at the training length", "Press et al. 2022",
          "matches sinusoidal at the training length", ("baseline", "alibi_positions"), ("equivalent", "better"),
          ("worse",)),
    Claim("ALiBi holds up on long inputs", "Press et al. 2022", "better than sinusoidal beyond the training length",
          ("baseline", "alibi_positions"), ("equivalent", "better"), ("worse",), bucket="src_gt64"),
    Claim("T5's bucketed bias serves as the only position signal", "Raffel et al. 2020", "used throughout T5",
          ("baseline", "t5_positions"), ("equivalent", "better"), ("worse",)),
    Claim("A deep encoder with a one-layer decoder keeps the balanced model's accuracy", "Kasai et al. 2021",
          "12-1 layers on par with 6-6 in BLEU, decoding faster", ("baseline", "enc5_dec1"),
          ("equivalent", "better"), ("worse",)),
    Claim("RMSNorm matches LayerNorm in machine translation", "Zhang & Sennrich 2019",
          "comparable BLEU to LayerNorm, faster", ("baseline", "rmsnorm"), ("equivalent", "better"), ("worse",)),
    Claim("A GLU feed-forward (SwiGLU) beats ReLU at equal parameters", "Shazeer 2020",
          "lower perplexity than ReLU at equal parameters", ("baseline", "swiglu"), ("better",), ("worse",)),
    Claim("Most Transformer modifications do not transfer", "Narang et al. 2021",
          "few changes improve on the original across tasks", ("baseline", "modern"), ("equivalent", "worse"),
          ("better",)),
)


def agreement(claim: Claim, found: dict[tuple[str, str], dict[str, Any]]) -> tuple[str, str] | None:
    """(verdict of its comparison, agrees | disagrees | inconclusive | pending), or None when the study lacks
    it."""
    entry = found.get(claim.pair)
    if entry is None:
        return None
    v = verdict(entry)
    if claim.pair == ("pre", "pre_nowarmup") and v == "worse":  # "much less": under half post-LN's drop
        post = found.get(("baseline", "post_nowarmup"))
        smaller = post is not None and abs(entry["bleu"]["delta"]) < abs(post["bleu"]["delta"]) / 2
        return v, "agrees" if smaller else "disagrees"
    if v == "pending":
        return v, v
    return v, ("agrees" if v in claim.agrees_when else "disagrees" if v in claim.disagrees_when else "inconclusive")


DEPTH_CLAIM = ("Post-LN without warm-up fails where pre-LN does not, and more so deeper and at larger rates",
               "Xiong et al. 2020", "Post-LN training unstable without warm-up")
DEPTH_RATES = ("1e-3", "2e-3")


def depth_agreement(depth: dict[str, Any]) -> tuple[str, str]:
    """(post-LN's failures per setting, agrees | disagrees | inconclusive | pending) from the depth question's
    numbers (seqlab.analysis.study_tables.depth_table): pending until every run is archived."""
    variants = depth.get("variants", {})
    if any(len(variants.get(v, {}).get("seeds", [])) < SEEDS for v in QUESTIONS["depth"].variants):
        done = sum(len(variants.get(v, {}).get("seeds", [])) for v in QUESTIONS["depth"].variants)
        return f"pending: {done} of {len(QUESTIONS['depth'].variants) * SEEDS} runs", "pending"
    fails = {c["post"]: c["fails"] for c in depth["comparisons"]}
    without = [fails[f"deep_post_nowarmup_lr{lr}"] for lr in DEPTH_RATES]
    with_ = [fails[f"deep_post_warmup_lr{lr}"] for lr in DEPTH_RATES]

    def yes(flags: list[bool]) -> str:
        return ", ".join(f"{lr} {'fails' if f else 'no'}" for lr, f in zip(DEPTH_RATES, flags, strict=True))

    seen = f"post-LN vs pre-LN at lr {yes(without)} without warm-up; {yes(with_)} with"
    if not any(without):
        return seen, "disagrees"
    hurts = any(w and not wo for w, wo in zip(with_, without, strict=True))
    return seen, "inconclusive" if hurts else "agrees"


def claims_table(summary: dict[str, Any]) -> str:
    """claim | source | published | seqlab's figure (Δ BLEU, verdict) | agrees?, for the claims the study has tested;
    the depth question's claim last, from its failure rule."""
    lines = ["| claim | source | published | seqlab's figure | agrees? |", "|---|---|---|---|---|"]
    for claim in CLAIMS:
        found = comparisons(summary, claim.bucket)
        result = agreement(claim, found)
        if result is None:
            continue
        entry = found[claim.pair]
        where = f" on {entry['n_sentences']} sources of {K.bucket_title(claim.bucket)} tokens" if claim.bucket else ""
        lines.append(f"| {claim.claim} | {claim.source} | {claim.published} | {claim.pair[1]} − {claim.pair[0]}"
                     f"{where}: {verdict_cell(entry, result[0])} | {result[1]} |")
    if "depth" in summary:
        seen, agrees = depth_agreement(summary["depth"])
        lines.append(f"| {' | '.join(DEPTH_CLAIM)} | {seen} | {agrees} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def early_vs_trained(short: dict[str, Any], trained: dict[str, Any]) -> str:
    """Each comparison's verdict after 300 updates and at the trained budget: held or changed."""
    early, late = comparisons(short), comparisons(trained)
    lines = ["| comparison | 300 updates: Δ BLEU (verdict) | trained: Δ BLEU (verdict) | |", "|---|---|---|---|"]
    for pair in [p for p in early if p in late]:
        a, b = verdict(early[pair]), verdict(late[pair])
        lines.append(f"| {pair[1]} − {pair[0]} | {verdict_cell(early[pair], a)} | {verdict_cell(late[pair], b)} | "
                     f"{'pending' if 'pending' in (a, b) else 'held' if a == b else 'changed'} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def claims_report(trained: Path, short: Path) -> str:
    """The claims table (beam 5, the reported setting) and early vs trained (greedy, the setting both budgets
    decode), from the two archives' summaries; written to the trained archive as claims.md."""
    def summary(path: Path) -> dict[str, Any]:
        return json.loads(path.read_text()) if path.is_file() else {}

    parts = []
    table = claims_table(summary(trained / "summary.beam5.json"))
    if table:
        parts.append("**Against the papers** (beam 5; verdicts by the rules fixed before the runs)\n\n" + table)
    table = early_vs_trained(summary(short / "summary.json"), summary(trained / "summary.json"))
    if table:
        parts.append("**Early vs trained** (greedy, the setting both budgets decode)\n\n" + table)
    text = "\n\n".join(parts)
    if text:
        atomic_write_text(trained / "claims.md", text + "\n")
    return text
