"""Coverage penalties (Wu et al. 2016, eq. 14; See et al. 2017's summary variant) with OpenNMT-py's formulas.

A hypothesis's coverage of source position j is the cross-attention it paid to j, summed over its steps
(the EOS step included). OpenNMT-py subtracts beta times a penalty from a hypothesis's score when it
finishes (its default, non-stepwise rule), so the search's ranking of running beams is unchanged:

- `wu`: -sum_j log(min(coverage_j, 1)), GNMT's: a source word attended less than once in total costs;
- `summary`: sum_j max(coverage_j, 1) - S: a word attended more than once costs (repetition, in summaries).

The attention is the last decoder layer's cross-attention averaged over heads (OpenNMT-py reads its first
head; one head of several is an arbitrary choice, their mean is the layer's alignment). Padding positions
are given coverage 1, so they add nothing to either penalty: `summary` is unchanged by it, and `wu` sums
over the source's own words, as the formula does (OpenNMT-py's batched log(0) at padding would be -inf).
The weights are computed beside the fused attention, for the last layer only (model.layers.attention_weights).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import torch
from torch import Tensor

from seqlab.model import Model

CoverageRule = Literal["wu", "summary"]


def coverage_penalty(coverage: Tensor, rule: CoverageRule, beta: float) -> Tensor:
    """(..., S) summed attention per source position -> (...) the penalty beta * p(coverage)."""
    if rule == "wu":
        return -beta * coverage.clamp(max=1.0).log().sum(-1)
    return beta * (coverage.clamp(min=1.0).sum(-1) - coverage.shape[-1])


class Coverage:
    """Each beam's coverage during beam search: started from the sources' padding, grown by every step's
    attention, and moved with the beams as they follow their parents and examples finish."""

    def __init__(self, src_pad_mask: Tensor, num_beams: int, rule: CoverageRule, beta: float) -> None:
        self.k, self.rule, self.beta = num_beams, rule, beta
        self.coverage = src_pad_mask.float().repeat_interleave(num_beams, 0)  # (B * K, S): 1 at padding
        self.recorded: list[Tensor] = []

    @contextmanager
    def recording(self, model: Model) -> Iterator[Coverage]:
        """Record the last decoder layer's cross-attention weights while the block runs."""
        layer = model.decoder_layers[-1].cross_attn
        layer.recorder = self.recorded
        try:
            yield self
        finally:
            layer.recorder = None
            self.recorded.clear()

    def after_step(self) -> Tensor:
        """(A * K, S) each beam's coverage with the step just decoded: its attention added (the first step
        decodes one row per example, which stands for its K beams)."""
        (weights,) = self.recorded  # (rows, H, 1, S)
        self.recorded.clear()
        attention = weights.mean(1)[:, -1]
        if attention.shape[0] != self.coverage.shape[0]:
            attention = attention.repeat_interleave(self.k, 0)
        return self.coverage + attention

    def penalty(self, after: Tensor, source_beam: Tensor) -> Tensor:
        """(A, C) the penalty of each candidate, whose coverage is its parent beam's `after`."""
        a, c = source_beam.shape
        rows = torch.arange(a, device=source_beam.device)[:, None] * self.k + source_beam
        return coverage_penalty(after[rows.view(-1)].view(a, c, -1), self.rule, self.beta)

    def follow(self, after: Tensor, parents: Tensor) -> None:
        """The running beams take their parents' coverage (parents: (A' * K,) rows of `after`)."""
        self.coverage = after[parents]
