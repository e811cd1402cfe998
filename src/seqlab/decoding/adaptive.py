"""Processors beyond Hugging Face's: the OpenAI/llama.cpp repetition penalties and entropy-adaptive temperatures.

Each states its definition and source, validates its arguments, and never edits its input.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from seqlab.decoding.processors import NEG_INF, LogitsProcessor, _check


class FrequencyPresencePenalty(LogitsProcessor):
    """s_j - frequency * c_j - presence * [c_j > 0], with c_j the count of token j generated so far.

    The OpenAI API's `frequency_penalty` / `presence_penalty`, as llama.cpp's penalties sampler applies
    them (there over its last `penalty_last_n` tokens; here over every generated token, the decoder
    start token excluded).
    """

    def __init__(self, frequency: float | None, presence: float | None) -> None:
        for name, value in (("frequency_penalty", frequency), ("presence_penalty", presence)):
            _check(value is None or math.isfinite(value), f"decoding.{name}={value} must be a finite number")
        self.frequency, self.presence = frequency or 0.0, presence or 0.0

    def __call__(self, prefix: Tensor, scores: Tensor) -> Tensor:
        generated = prefix[:, 1:]  # (N, T - 1)
        counts = torch.zeros_like(scores).scatter_add_(1, generated, torch.ones_like(generated, dtype=scores.dtype))
        return scores - self.frequency * counts - self.presence * (counts > 0).to(scores.dtype)


def _entropy(scores: Tensor) -> tuple[Tensor, Tensor]:
    """(N,) entropy in nats of softmax(scores), and (N,) the number of candidates (finite scores)."""
    logp = torch.log_softmax(scores.double(), dim=-1)
    p = logp.exp()
    entropy = -(torch.where(p > 0, p * logp, torch.zeros_like(p))).sum(-1)
    return entropy, torch.isfinite(scores).sum(-1)


def _divide(scores: Tensor, temperature: Tensor) -> Tensor:
    """scores / T per row; a row with T <= 0 keeps only its best token (llama.cpp's greedy temperature)."""
    greedy = temperature <= 0
    scaled = scores / torch.where(greedy, torch.ones_like(temperature), temperature)[:, None].to(scores.dtype)
    best = scores.max(dim=-1, keepdim=True).values
    only_best = torch.where(scores >= best, scores, torch.full_like(scores, NEG_INF))
    return torch.where(greedy[:, None], only_best, scaled)


class DynamicTemperature(LogitsProcessor):
    """llama.cpp's dynamic temperature (`dynatemp`, from koboldcpp): T = T_min + (T_max - T_min) * (H / H_max) ** e,
    with T_min = max(0, t - delta), T_max = t + delta, H the entropy of softmax(scores) and H_max = ln(n)
    for n candidates; a row with one candidate is left alone. delta = 0 is plain temperature t."""

    def __init__(self, temperature: float, delta: float, exponent: float = 1.0) -> None:
        _check(temperature >= 0, f"decoding.temperature={temperature} must be >= 0 with dynatemp_range")
        _check(delta >= 0, f"decoding.dynatemp_range={delta} must be >= 0")
        _check(exponent > 0, f"decoding.dynatemp_exponent={exponent} must be > 0")
        self.temperature, self.delta, self.exponent = temperature, delta, exponent

    def __call__(self, prefix: Tensor, scores: Tensor) -> Tensor:
        n_rows = scores.shape[0]
        if self.delta <= 0:
            return _divide(scores, torch.full((n_rows,), float(self.temperature), device=scores.device))
        low, high = max(0.0, self.temperature - self.delta), self.temperature + self.delta
        entropy, n = _entropy(scores)
        normalized = entropy / torch.log(n.clamp(min=2).double())
        temperature = low + (high - low) * normalized.pow(self.exponent)
        out = _divide(scores, temperature.float())
        return torch.where((n <= 1)[:, None], scores, out)


class EntropyTemperature(LogitsProcessor):
    """Entropy-based dynamic temperature (EDT, Zhang et al. 2024, arXiv 2403.14541): T = T0 * N ** (theta / H),
    with H the entropy (nats) of softmax(scores) and N < 1 (0.8 in the paper): confident steps (low H) get
    a low temperature, uncertain ones approach T0. H = 0 gives T = 0: the best token only."""

    def __init__(self, temperature: float, theta: float, base: float = 0.8) -> None:
        _check(temperature > 0, f"decoding.temperature={temperature} must be > 0 with edt_theta")
        _check(theta > 0, f"decoding.edt_theta={theta} must be > 0")
        _check(0 < base < 1, f"decoding.edt_base={base} must be in (0, 1)")
        self.temperature, self.theta, self.base = temperature, theta, base

    def __call__(self, prefix: Tensor, scores: Tensor) -> Tensor:
        entropy, _ = _entropy(scores)
        exponent = self.theta / entropy.clamp(min=1e-300)
        temperature = self.temperature * torch.pow(torch.full_like(entropy, self.base), exponent)
        return _divide(scores, temperature.float())
