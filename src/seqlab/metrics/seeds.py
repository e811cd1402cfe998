"""Seeds as an axis: a variant's spread over training seeds, and whether two variants differ beyond it.

A paired test on one test set says whether two *trained models* differ; it says
nothing about whether another seed would have given the opposite result. For runs
that differ only in seed, this module gives the mean and sample standard deviation
over seeds, and for two variants:

- `exceeds_spread`: |difference of means| > 2 x the pooled seed standard deviation
  (the difference is larger than what reseeding one variant typically moves it);
- `p_permutation`: the exact two-sided permutation test of the difference of means
  over every reassignment of the seeds' values to the two variants (no distribution
  assumed). With 3 + 3 seeds there are 20 assignments, so the smallest possible
  p-value is 2/20 = 0.1: three seeds cannot show significance at 0.05 by themselves,
  which is why the study reports both this and the per-seed paired tests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import combinations


@dataclass(frozen=True)
class SeedSummary:
    """One variant's metric over seeds."""

    values: dict[int, float]  # seed -> value

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return sum(self.values.values()) / self.n

    @property
    def sd(self) -> float:
        """Sample standard deviation (n - 1); 0 for a single seed."""
        if self.n < 2:
            return 0.0
        m = self.mean
        return math.sqrt(sum((v - m) ** 2 for v in self.values.values()) / (self.n - 1))

    def to_dict(self) -> dict[str, object]:
        return {"mean": self.mean, "sd": self.sd, "n": self.n, "values": {str(k): v for k, v in self.values.items()}}


@dataclass(frozen=True)
class SeedComparison:
    """Variant b against variant a over seeds."""

    delta: float  # mean(b) - mean(a)
    pooled_sd: float
    exceeds_spread: bool
    p_permutation: float

    def to_dict(self) -> dict[str, object]:
        return {"delta": self.delta, "pooled_sd": self.pooled_sd, "exceeds_spread": self.exceeds_spread,
                "p_permutation": self.p_permutation}


def summarize(values: Mapping[int, float]) -> SeedSummary:
    if not values:
        raise ValueError("no seeds to summarize")
    return SeedSummary(dict(sorted(values.items())))


def pooled_sd(a: SeedSummary, b: SeedSummary) -> float:
    dof = a.n + b.n - 2
    if dof <= 0:
        return 0.0
    return math.sqrt(((a.n - 1) * a.sd ** 2 + (b.n - 1) * b.sd ** 2) / dof)


def permutation_p(a: list[float], b: list[float]) -> float:
    """Exact two-sided permutation p-value of mean(b) - mean(a) (the observed split counts)."""
    pooled = a + b
    observed = abs(sum(b) / len(b) - sum(a) / len(a))
    total = extreme = 0
    for chosen in combinations(range(len(pooled)), len(b)):
        picked = set(chosen)
        bb = [pooled[i] for i in picked]
        aa = [pooled[i] for i in range(len(pooled)) if i not in picked]
        total += 1
        extreme += abs(sum(bb) / len(bb) - sum(aa) / len(aa)) >= observed - 1e-12
    return extreme / total


def compare(a: SeedSummary, b: SeedSummary) -> SeedComparison:
    """Whether b differs from a by more than the seed-to-seed spread."""
    delta = b.mean - a.mean
    spread = pooled_sd(a, b)
    exceeds = spread > 0 and abs(delta) > 2 * spread
    return SeedComparison(delta, spread, exceeds, permutation_p(list(a.values.values()), list(b.values.values())))
