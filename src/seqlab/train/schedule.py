"""Learning-rate schedules as multipliers of the peak rate (for LambdaLR)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

Schedule = Literal["inverse_sqrt", "cosine", "constant"]


def lr_multiplier(kind: Schedule, warmup_steps: int, max_steps: int | None = None,
                  min_ratio: float = 0.0, ramp: bool = True) -> Callable[[int], float]:
    """Linear warmup to 1 over `warmup_steps` (`ramp=False`: 1 from the first step instead), then:

    inverse_sqrt: sqrt(warmup / step), fairseq's `inverse_sqrt` (Vaswani et al. 2017, 5.3);
    cosine: half-cosine from 1 down to `min_ratio` at `max_steps`;
    constant: 1.
    `step` counts optimizer updates from 1.
    """
    def multiplier(step: int) -> float:
        step = max(step, 1)
        if step < warmup_steps:
            return step / warmup_steps if ramp else 1.0
        if kind == "inverse_sqrt":
            return math.sqrt(max(warmup_steps, 1) / step)
        if kind == "cosine":
            if not max_steps:
                raise ValueError("the cosine schedule needs trainer.max_steps")
            progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
            return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
        return 1.0

    return multiplier
