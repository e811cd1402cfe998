"""Matplotlib figures as base64 PNGs, inlined by the HTML report and the inspection pages: the figure
helpers, attention heat maps and the beam tree."""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from torch import Tensor


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


class TreeNode(Protocol):
    """One candidate of a beam step, as seqlab.inference.inspection.BeamNode records it."""

    step: int
    slot: int
    parent: int
    token: str
    score: float
    fate: str  # kept | finished | pruned


def beam_tree_png(nodes: Sequence[TreeNode]) -> str:
    """The beam tree: kept candidates (dots) joined to the beam they extend, finished ones (stars),
    pruned ones (grey); x = step, y = rank; labels are the pieces."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = max((n.step for n in nodes), default=1)
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * steps), 4))
    previous: dict[int, tuple[int, int]] = {}  # running beam index -> (step, slot) of its node
    for t in range(1, steps + 1):
        here = [n for n in nodes if n.step == t]
        kept = [n for n in here if n.fate == "kept"]
        for n in here:
            style = {"kept": ("o", "C0"), "finished": ("*", "C3"), "pruned": (".", "0.75")}[n.fate]
            ax.plot(t, -n.slot, style[0], color=style[1], ms=8 if n.fate != "pruned" else 4)
            if n.fate != "pruned":
                ax.annotate(n.token, (t, -n.slot), fontsize=6, xytext=(3, 2), textcoords="offset points")
                if n.parent in previous:
                    pt, ps = previous[n.parent]
                    ax.plot([pt, t], [-ps, -n.slot], "-", color=style[1], lw=0.6, alpha=0.7)
        previous = {i: (t, n.slot) for i, n in enumerate(sorted(kept, key=lambda n: -n.score))}
    ax.set_xlabel("step")
    ax.set_ylabel("candidate rank")
    ax.set_yticks([])
    ax.set_title("beam search: kept (blue), finished (red stars), pruned (grey)", fontsize=9)
    fig.tight_layout()
    return figure_png(fig, dpi=90)


def heatmap_grid(weights: Tensor, queries: list[str], keys: list[str], title: str,
                 value_range: tuple[float | None, float | None] = (0.0, 1.0)) -> str:
    """One layer, (H, T, S): a row of heat maps, one per head, as a base64 PNG (`value_range`: the colour
    scale; (None, None) fits it to the values)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heads = weights.shape[0]
    size = max(2.5, 0.22 * max(len(queries), len(keys)))
    fig, axes = plt.subplots(1, heads, figsize=(size * heads, size), squeeze=False)
    for h, ax in enumerate(axes[0]):
        ax.imshow(weights[h].numpy(), cmap="viridis", vmin=value_range[0], vmax=value_range[1], aspect="auto")
        ax.set_title(title if heads == 1 else f"{title}, head {h + 1}", fontsize=8)
        ax.set_xticks(range(len(keys)), keys, rotation=90, fontsize=6)
        ax.set_yticks(range(len(queries)), queries, fontsize=6)
    fig.tight_layout()
    return figure_png(fig, dpi=90)
