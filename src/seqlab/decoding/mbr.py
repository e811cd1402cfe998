"""Minimum Bayes risk decoding: choose the candidate with the highest expected utility.

Sampling-based MBR (Eikema & Aziz 2020, 2022; Freitag et al. 2022, 2023): draw N candidates
from the model with any search or sampling setting, estimate each one's expected utility as
its mean utility against M pseudo-references drawn from the model (by default the candidates
themselves, M = N, self-comparison included, as `mbrs`'s MBR decoder does), and output the
candidate with the highest estimate. With beam candidates this is n-best reranking.

The utilities: sentence chrF, BLEU and ROUGE (metrics.utility), COMET and BERTScore (metrics.neural.utility,
each sentence embedded once), and CometKiwi, which scores each candidate alone: QE reranking (Fernandes et al.
2022), labelled `qe_cometkiwi_c<N>`. `model` names a neural utility's model (its metric's default when null).

Ties: the earlier candidate wins (a stable sort on expected utility, so the first of equal
scores, as `argmax` picks it); for beam candidates the earlier one is the better-scored
hypothesis, for samples the lower sample index. Identical texts always tie, so duplicates
never change the choice.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from seqlab.config import ConfigError, check_choice, check_types, typed
from seqlab.metrics.neural.utility import NEURAL_UTILITIES, RERANKERS, NeuralUtility, neural_utility
from seqlab.metrics.utility import ROUGE_UTILITIES, Utility, utility_matrix

MBRUtility = Literal[Utility, NeuralUtility]


@dataclass(frozen=True)
class MBRConfig:
    """MBR on top of a candidate setting (the DecodingConfig it belongs to)."""

    utility: MBRUtility = "chrf"
    candidates: int = 32  # N: samples, or the top N of a beam's n-best list (num_beams >= N)
    references: int | None = None  # M separate samples as pseudo-references; null = the candidates themselves
    model: str | None = None  # a neural utility's model (hub name in the local cache, or folder); null = default
    layers: int | None = None  # BERTScore's layer (null: bert-score's tuned layer for the model)

    def __post_init__(self) -> None:
        own = "decoding.mbr"
        check_types(self, own)
        check_choice(own, "utility", self.utility, MBRUtility)
        if self.utility not in NEURAL_UTILITIES and (self.model is not None or self.layers is not None):
            raise ConfigError(f"{own}.model / {own}.layers name a neural utility's model; utility={self.utility} "
                              "reads none (use comet, bertscore or cometkiwi)")
        if self.utility in RERANKERS and self.references is not None:
            raise ConfigError(f"{own}.references={self.references}: utility={self.utility} scores each candidate "
                              "alone (QE reranking) and reads no pseudo-references; set it to null")
        if self.candidates < 2:
            raise ConfigError(f"{own}.candidates={self.candidates}: MBR chooses among candidates and needs at "
                              "least 2 (Freitag et al. 2023 use 32 or more)")
        if self.references is not None and self.references < 1:
            raise ConfigError(f"{own}.references={self.references} must be >= 1, or null to compare the "
                              "candidates with each other")

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> MBRConfig:
        return typed(cls, values, "decoding.mbr")

    @property
    def needs_summaries(self) -> bool:
        """ROUGE utilities are summary metrics: refused for a translation task."""
        return self.utility in ROUGE_UTILITIES

    @property
    def label(self) -> str:
        refs = f"_r{self.references}" if self.references is not None else ""
        kind = "qe" if self.utility in RERANKERS else "mbr"
        return f"{kind}_{self.utility}_c{self.candidates}{refs}"


def check_task(mbr: MBRConfig | None, task: str, where: str) -> None:
    """Fail, naming the key, when a ROUGE utility would rank translations (`where` names the corpus)."""
    if mbr is not None and mbr.needs_summaries and task != "summarization":
        raise ConfigError(f"decoding.mbr.utility={mbr.utility} is a summarization metric but {where} is a "
                          f"{task} corpus; use decoding.mbr.utility=chrf or bleu")


@dataclass
class MBRChoice:
    """One source's candidates with their expected utilities, best first in `order`."""

    candidates: list[str]
    expected_utility: list[float]  # per candidate, in candidate order
    order: list[int]  # candidate indices by expected utility, ties to the earlier candidate
    seconds: float = 0.0  # time spent on the utility matrix

    @property
    def chosen(self) -> int:
        return self.order[0]

    def to_dict(self) -> dict[str, Any]:
        return {"candidates": self.candidates, "expected_utility": self.expected_utility, "chosen": self.chosen}


def expected_utilities(mbr: MBRConfig, candidates: Sequence[str], references: Sequence[str],
                       source: str | None = None) -> np.ndarray:
    """(N,) mean utility of each candidate against the pseudo-references (a reranker: its score alone).

    Each distinct text is scored once (samples repeat), weighted by how often it was drawn.
    """
    hyp_texts, hyp_index = np.unique(np.array(candidates, dtype=object), return_inverse=True)
    if mbr.utility in RERANKERS:  # each candidate's own score: no pseudo-references
        return neural_utility(mbr.utility, source, list(hyp_texts), [], mbr.model)[:, 0][hyp_index.reshape(-1)]
    ref_texts, ref_count = np.unique(np.array(references, dtype=object), return_counts=True)
    if mbr.utility in NEURAL_UTILITIES:
        matrix = neural_utility(mbr.utility, source, list(hyp_texts), list(ref_texts), mbr.model, mbr.layers)
    else:
        matrix = utility_matrix(mbr.utility, list(hyp_texts), list(ref_texts))  # (distinct hyps, distinct refs)
    return (matrix @ ref_count.astype(np.float64) / len(references))[hyp_index.reshape(-1)]


def choose(mbr: MBRConfig | str, candidates: Sequence[str], references: Sequence[str] | None = None,
           source: str | None = None) -> MBRChoice:
    """MBR over one source's candidates; references default to the candidates themselves. `mbr`: the
    setting, or a utility's name with the setting's defaults."""
    start = time.perf_counter()
    mbr = MBRConfig(utility=mbr) if isinstance(mbr, str) else mbr
    refs = candidates if references is None else references
    scores = expected_utilities(mbr, candidates, refs, source)
    order = np.argsort(-scores, kind="stable")
    return MBRChoice(list(candidates), scores.tolist(), order.tolist(), time.perf_counter() - start)


def ranked_distinct(choice: MBRChoice, n: int) -> list[int]:
    """The first n candidates of `order` with distinct texts (the MBR n-best list)."""
    seen: set[str] = set()
    out = []
    for i in choice.order:
        if choice.candidates[i] not in seen:
            seen.add(choice.candidates[i])
            out.append(i)
            if len(out) == n:
                break
    return out
