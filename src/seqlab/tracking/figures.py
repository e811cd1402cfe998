"""Matplotlib figures as base64 PNGs, inlined by the HTML report and the inspection pages."""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from typing import Any


def png(draw: Callable[[Any], None], width: float = 7.0, height: float = 3.6, grid: tuple[int, int] = (1, 1)
         ) -> str:
    """A base64 PNG of `draw(ax)` (one axes, or an array of them for a grid)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(*grid, figsize=(width, height), squeeze=grid == (1, 1))
    draw(ax)
    fig.tight_layout()
    return figure_png(fig)


def figure_png(fig: Any, dpi: int = 110) -> str:
    """A matplotlib figure as a base64 PNG for an <img> tag (the figure is closed)."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()
