"""The text-generation chapter's views of one prompt (`seqlab inspect --figures DIR`): greedy search's top-k
tokens and probabilities at every step, greedy's against beam search's sequence log-prob, the next-token
distribution at three temperatures, and the sorted probabilities with top-k's cut and top-p's cumulative line."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from seqlab.data.tokenizer import Tokenizer
from seqlab.decoding import DecodingConfig, generate
from seqlab.inference.inspection import TraceStep, one_source
from seqlab.io import atomic_write
from seqlab.model import Model
from seqlab.tracking.figures import png

TEMPERATURES = (0.5, 1.0, 2.0)


@dataclass(frozen=True)
class Hypothesis:
    text: str
    logprob: float  # the sequence's log-probability under the model (natural log)


def best(model: Model, tokenizer: Tokenizer, source: str, cfg: DecodingConfig) -> Hypothesis:
    """The search's best output of one source and its sequence log-prob."""
    src, pad = one_source(model, tokenizer, source)
    out = generate(model, src, pad, cfg)
    n = int(out.lengths[0, 0])
    return Hypothesis(tokenizer.decode_target(out.sequences[0, 0, :n].tolist()),
                      float(out.token_logprobs[0, 0, :n].sum()))


def next_token_logits(model: Model, tokenizer: Tokenizer, source: str) -> Tensor:
    """(V,) the model's logits for the first token after the prompt (or source)."""
    src, pad = one_source(model, tokenizer, source)
    seen: list[Tensor] = []
    generate(model, src, pad, DecodingConfig(max_length=1, suppress_special=False),
             on_step=lambda t, active, logits, scores, chosen: seen.append(logits[0].float()))
    return seen[0]


def step_table(steps: list[TraceStep]) -> str:
    """The chapter's table: per step the chosen token and the top-k with their probabilities."""
    lines = [f"{'step':>4}  {'chosen':<16}{'p':>7}  top-{len(steps[0].before) if steps else 0}"]
    for s in steps:
        top = ", ".join(f"{p!r} {q:.3f}" for p, q in s.before)
        lines.append(f"{s.step:>4}  {s.chosen!r:<16}{s.probability:>7.3f}  {top}")
    return "\n".join(lines)


def temperature_png(logits: Tensor, pieces: list[str], shown: int = 20) -> str:
    """The next-token distribution's most probable tokens at each temperature, as bars."""
    order = logits.argsort(descending=True)[:shown]

    def draw(ax) -> None:
        width = 0.8 / len(TEMPERATURES)
        for i, t in enumerate(TEMPERATURES):
            probs = torch.softmax(logits / t, -1)[order]
            ax.bar([j + i * width for j in range(shown)], probs.tolist(), width, label=f"T = {t:g}")
        ax.set_xticks([j + 0.4 - width / 2 for j in range(shown)], [pieces[int(k)] for k in order], rotation=70,
                      fontsize=7)
        ax.set_ylabel("p(next token)")
        ax.legend()

    return png(draw, 8.0, 3.8)


def truncation_png(logits: Tensor, top_k: int, top_p: float, shown: int = 40) -> str:
    """Sorted probabilities with top-k's cut, and their cumulative sum with top-p's threshold."""
    probs = torch.softmax(logits, -1).sort(descending=True).values[:shown]
    cumulative = probs.cumsum(0)

    def draw(ax) -> None:
        ax.bar(range(1, shown + 1), probs.tolist(), color="tab:blue", label="p, sorted")
        ax.axvline(top_k + 0.5, color="tab:red", linestyle="--", label=f"top-k cut, k = {top_k}")
        twin = ax.twinx()
        twin.plot(range(1, shown + 1), cumulative.tolist(), color="tab:green", label="cumulative p")
        twin.axhline(top_p, color="tab:green", linestyle=":", label=f"top-p threshold, p = {top_p:g}")
        twin.set_ylim(0, 1.02)
        ax.set_xlabel("rank")
        ax.set_ylabel("p")
        lines = ax.get_legend_handles_labels()
        more = twin.get_legend_handles_labels()
        ax.legend(lines[0] + more[0], lines[1] + more[1], loc="center right", fontsize=8)

    return png(draw, 7.0, 3.6)


def write_figures(model: Model, tokenizer: Tokenizer, source: str, folder: Path, top_k: int = 10,
                  top_p: float = 0.9) -> list[Path]:
    """temperature.png and truncation.png of the prompt's next-token distribution, in `folder`."""
    logits = next_token_logits(model, tokenizer, source)
    pieces = [tokenizer.id_to_piece(i) for i in range(logits.shape[0])]
    out = []
    for name, image in (("temperature.png", temperature_png(logits, pieces)),
                        ("truncation.png", truncation_png(logits, top_k, top_p))):
        path = Path(folder) / name
        atomic_write(path, lambda f, image=image: f.write(base64.b64decode(image)))
        out.append(path)
    return out
