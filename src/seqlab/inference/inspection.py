"""Inside the model and the search, for one source: attention maps and a step-by-step decoding trace.

For a one-stack model (decoder-only, prefix LM) the stack's attention is shown in its three parts: the
source over itself (as an encoder's), the target over the target, and the target over the source (as
cross-attention, which the alignment averages).

`seqlab inspect --ckpt RUN --text "..." [--num-beams 4] [--out page.html]`
(`make inspect`) writes one HTML page: per layer a grid of heat maps (one per head) of the encoder
self-attention, decoder self-attention and cross-attention over subword pieces, the cross-attention
averaged over heads and layers as an alignment, and for the decoding setting the trace of every step:
the chosen token and its probability with the top-k alternatives before and after the processors.

Attention weights are recorded only inside `record_attention`, computed beside the fused kernels
(layers.attention_weights), so the model's outputs are the same with and without asking.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from seqlab.data.tokenizer import Tokenizer
from seqlab.decoding import DecodingConfig, generate
from seqlab.decoding.methods import BEAM, GREEDY, method_of
from seqlab.decoding.search import NEG
from seqlab.inference.evaluation import decode_texts
from seqlab.model import Model, Seq2SeqTransformer
from seqlab.model.layers import MultiHeadAttention
from seqlab.model.transformer import with_bias
from seqlab.tracking.decoding_sections import candidates_table
from seqlab.tracking.figures import beam_tree_png, heatmap_grid

KINDS = ("encoder", "decoder_self", "cross")
POSITION_NOTES = {  # what the page says of each scheme (docs/positions.md)
    "sinusoidal": "a fixed table added to the embeddings", "learned": "a learned table added to the embeddings",
    "rope": "queries and keys rotated by their positions in every self-attention",
    "alibi": "a fixed linear bias on self-attention logits, shown below",
    "t5": "a learned bucketed bias on self-attention logits, shown below", "none": "no position information"}


@dataclass
class AttentionMaps:
    """Weights of every layer and head for one source and one target prefix."""

    src_pieces: list[str]
    tgt_pieces: list[str]  # the decoder inputs: <s> then the target tokens
    weights: dict[str, list[Tensor]]  # kind -> per layer (H, T_query, T_key)
    positions: str = "sinusoidal"  # the model's position scheme
    position_bias: dict[str, Tensor] | None = None  # ALiBi / T5: stack -> (H, T_query, T_key), all its layers add

    def alignment(self) -> Tensor:
        """(T, S) cross-attention averaged over heads and layers."""
        return torch.stack([w.mean(0) for w in self.weights["cross"]]).mean(0)


@contextmanager
def record_attention(model: Model) -> Iterator[dict[str, list[Tensor]]]:
    """Collect the attention weights of every layer while the block runs: kind -> list of (B, H, T, S)."""
    found: dict[str, list[Tensor]] = {k: [] for k in KINDS}
    for module, kind in model.attention_modules():
        module.recorder = found[kind]
    try:
        yield found
    finally:
        for module in model.modules():
            if isinstance(module, MultiHeadAttention):
                module.recorder = None


def one_source(model: Model, tokenizer: Tokenizer, source: str) -> tuple[Tensor, Tensor]:
    """(1, S) ids of one source, truncated to the model's positions, and its (1, S) pad mask (all False)."""
    src = torch.tensor([tokenizer.encode_source([source])[0][: model.cfg.max_positions]])
    return src, torch.zeros_like(src, dtype=torch.bool)


def pieces(tokenizer: Tokenizer, ids: list[int], side: str) -> list[str]:
    return [tokenizer.id_to_piece(int(i), side) for i in ids]  # type: ignore[arg-type]


@torch.no_grad()
def attention_maps(model: Model, tokenizer: Tokenizer, source: str, target: str | None = None,
                   cfg: DecodingConfig | None = None) -> AttentionMaps:
    """Teacher-forced attention over `target` (the model's own hypothesis under `cfg` when None)."""
    model.eval()
    device = next(model.parameters()).device  # computed where the model is (never moved); read back on the CPU
    src, pad = (t.to(device) for t in one_source(model, tokenizer, source))
    if target is None:
        out = generate(model, src, pad, cfg or DecodingConfig())
        tgt = out.sequences[0, 0, : out.lengths[0, 0]].tolist()
    else:
        tgt = tokenizer.encode_target([target])[0][: model.cfg.max_positions - 1]
    layout = model.cfg.layout
    src, pad, start = layout.split(src, pad, model.cfg.pad_id)  # a causal LM's prompt's last token opens it
    first = model.cfg.bos_id if start is None else int(start[0])
    tgt_in = torch.tensor([[first, *tgt[:-1]]], device=device)
    with record_attention(model) as found:
        model(src, pad, tgt_in)
    weights = {kind: [w[0].float().cpu() for w in found[kind]] for kind in KINDS}
    # one stack over source and target: its parts play the three kinds' roles
    weights = layout.three_kinds(weights["decoder_self"], src.shape[1]) or weights
    return AttentionMaps(pieces(tokenizer, src[0].tolist(), "src"), pieces(tokenizer, tgt_in[0].tolist(), "tgt"),
                         weights, model.cfg.positions, position_bias(model, src.shape[1], tgt_in.shape[1]))


def position_bias(model: Model, src_len: int, tgt_len: int) -> dict[str, Tensor] | None:
    """The logit bias a relative scheme adds in each stack's self-attention (ALiBi, T5), (H, T, T) per stack
    (the decoder's with later keys at -inf, as its mask has them); None for schemes without one."""
    if model.cfg.layout.one_sequence:  # its bias spans source and target; the page shows the attention alone
        return None
    stacks = {"encoder": (model.encoder_positions, src_len), "decoder_self": (model.decoder_positions, tgt_len)}
    out = {}
    for kind, (module, n) in stacks.items():
        positions = Seq2SeqTransformer.self_attention_positions(module, 0, n)
        if positions.bias is None:
            return None
        bias, _ = with_bias(None, kind == "decoder_self", positions)  # the decoder's causal mask folded in
        out[kind] = bias[0].detach().float().cpu()
    return out


@dataclass
class TraceStep:
    """One greedy/sampling step: the chosen token and the top-k alternatives before and after processing."""

    step: int
    chosen: str
    chosen_id: int
    probability: float  # of the chosen token under the model (before processors)
    before: list[tuple[str, float]]  # top-k (piece, probability) of the model's distribution
    after: list[tuple[str, float]]  # top-k (piece, probability) after the processors


@torch.no_grad()
def trace(model: Model, tokenizer: Tokenizer, source: str, cfg: DecodingConfig,
          k: int = 5) -> list[TraceStep]:
    """Greedy decoding of one source, step by step, with what the processors changed.

    For method=greedy the chosen tokens are `generate`'s output for the same config (tested).
    """
    if method_of(cfg) is not GREEDY:
        raise ValueError("step traces follow greedy decoding; use method=greedy (beam traces are not drawn)")
    model.eval()
    src, pad = one_source(model, tokenizer, source)
    steps: list[TraceStep] = []

    def top(p: Tensor) -> list[tuple[str, float]]:
        return [(tokenizer.id_to_piece(int(i)), float(p[i])) for i in p.topk(k).indices]

    def record(t: int, active: Tensor, logits: Tensor, scores: Tensor, chosen: Tensor) -> None:
        p_raw, p_after = F.softmax(logits[0].float(), -1), F.softmax(scores[0].float(), -1)
        token = int(chosen[0])
        steps.append(TraceStep(t + 1, tokenizer.id_to_piece(token), token, float(p_raw[token]), top(p_raw),
                               top(p_after)))

    generate(model, src, pad, cfg, on_step=record)  # generate's own setup: limits, prompts, processors
    return steps


@dataclass
class BeamNode:
    """One of a beam step's 2K candidates: where it came from, what it added, what became of it."""

    step: int
    slot: int  # rank among the step's candidates
    parent: int  # the running beam (slot of the previous step's kept beams) it extends
    token: str
    score: float  # running score: sum of processed log-probs
    fate: str  # kept | finished | pruned


@torch.no_grad()
def beam_trace(model: Model, tokenizer: Tokenizer, source: str, cfg: DecodingConfig) -> list[BeamNode]:
    """Every step of beam search on one source: which candidates were kept, finished or pruned.

    The search is seqlab's own (`beam_search` with a step hook), so the finished hypotheses are
    `generate`'s (tested).
    """
    if method_of(cfg) is not BEAM or cfg.num_beam_groups > 1:
        raise ValueError("beam traces show plain beam search: method=beam with num_beam_groups=1")
    model.eval()
    src, pad = one_source(model, tokenizer, source)
    k = cfg.num_beams
    nodes: list[BeamNode] = []

    def record(t: int, active: Tensor, cand: Any) -> None:
        if 0 not in active.tolist():
            return
        row = active.tolist().index(0)
        kept = set(torch.topk(cand.scores[row] + cand.stops[row].float() * NEG, k)[1].tolist())
        for slot in range(cand.scores.shape[1]):
            stopped = bool(cand.stops[row, slot])
            fate = "finished" if stopped and slot < k else ("kept" if slot in kept and not stopped else "pruned")
            nodes.append(BeamNode(t + 1, slot, int(cand.source_beam[row, slot]),
                                  tokenizer.id_to_piece(int(cand.seq[row, slot, t + 1])),
                                  float(cand.scores[row, slot]), fate))

    generate(model, src, pad, cfg, on_step=record)
    return nodes


def alignment_png(maps: AttentionMaps) -> str:
    """The alignment view (cross-attention averaged over heads and layers) as a base64 PNG."""
    return heatmap_grid(maps.alignment()[None], maps.tgt_pieces, maps.src_pieces, "alignment")


def alignment_images(model: Model, tokenizer: Tokenizer, sources: list[str], hypotheses: list[str],
                     folder: Path) -> list[Path]:
    """The alignment of each source with the hypothesis the evaluation recorded for it (cross-attention,
    teacher-forced over that very output, not a decoding of its own), as PNG files attention-<i>.png in
    `folder`; computed on the model's device, which is left as it is."""
    paths = []
    for i, (source, hypothesis) in enumerate(zip(sources, hypotheses, strict=True)):
        path = folder / f"attention-{i}.png"
        path.write_bytes(base64.b64decode(alignment_png(attention_maps(model, tokenizer, source, hypothesis))))
        paths.append(path)
    return paths


def inspect_section(model: Model, tokenizer: Tokenizer, sources: list[str], title: str,
                    cfg: DecodingConfig | None = None) -> str:
    """HTML for a few sources of one checkpoint: each one's alignment and its greedy trace (for reports)."""
    cfg = cfg or DecodingConfig(max_length=40)
    parts = [f"<h2>Inside {html.escape(title)}</h2>"]
    for source in sources:
        maps = attention_maps(model, tokenizer, source, cfg=cfg)
        steps = trace(model, tokenizer, source, cfg, k=3)
        chosen = " ".join(f"{html.escape(s.chosen)} ({s.probability:.2f})" for s in steps)
        parts.append(f"<p><b>{html.escape(source)}</b><br/>greedy, each piece with its probability: {chosen}</p>"
                     f"<img src='data:image/png;base64,{alignment_png(maps)}'/>")
    return "".join(parts)


def inspect_page(maps: AttentionMaps, steps: list[TraceStep], title: str,
                 beam_nodes: list[BeamNode] | None = None) -> str:
    """The HTML page: attention grids per kind and layer, the alignment, the greedy trace, the beam tree."""
    keys = {"encoder": (maps.src_pieces, maps.src_pieces), "decoder_self": (maps.tgt_pieces, maps.tgt_pieces),
            "cross": (maps.tgt_pieces, maps.src_pieces)}
    body = [f"<h1>{html.escape(title)}</h1>", f"<p>positions: {html.escape(maps.positions)} "
            f"({POSITION_NOTES.get(maps.positions, '')})</p>"]
    body.append("<h2>Alignment: cross-attention averaged over heads and layers</h2>"
                f"<img src='data:image/png;base64,{alignment_png(maps)}'/>")
    for kind, bias in (maps.position_bias or {}).items():
        finite = bias[torch.isfinite(bias)]
        scale = (float(finite.min()), float(finite.max())) if finite.numel() else (None, None)
        body.append(f"<h2>{kind.replace('_', ' ')} position bias (added to every layer's logits)</h2>"
                    f"<img src='data:image/png;base64,{heatmap_grid(bias, *keys[kind], 'bias', scale)}'/>")
    for kind in KINDS:
        for i, layer in enumerate(maps.weights[kind]):
            body.append(f"<h2>{kind.replace('_', ' ')} attention, layer {i + 1}</h2>"
                        f"<img src='data:image/png;base64,{heatmap_grid(layer, *keys[kind], kind)}'/>")
    if steps:
        rows = "".join(
            f"<tr><td>{s.step}</td><td>{html.escape(s.chosen)}</td><td>{s.probability:.3f}</td>"
            f"<td>{html.escape(', '.join(f'{p} {q:.3f}' for p, q in s.before))}</td>"
            f"<td>{html.escape(', '.join(f'{p} {q:.3f}' for p, q in s.after))}</td></tr>" for s in steps)
        head = (f"<tr><th>step</th><th>chosen</th><th>p</th><th>top-{len(steps[0].before)} before processors</th>"
                "<th>after processors</th></tr>")
        body.append(f"<h2>Greedy decoding, step by step</h2><table>{head}{rows}</table>")
    if beam_nodes:
        kept = [n for n in beam_nodes if n.fate != "pruned"]
        rows = "".join(f"<tr><td>{n.step}</td><td>{n.slot}</td><td>{n.parent}</td><td>{html.escape(n.token)}</td>"
                       f"<td>{n.score:.3f}</td><td>{n.fate}</td></tr>" for n in kept)
        body.append("<h2>Beam search tree</h2>"
                    f"<img src='data:image/png;base64,{beam_tree_png(beam_nodes)}'/><table><tr><th>step</th>"
                    "<th>rank</th><th>extends beam</th><th>piece</th><th>running score</th><th>fate</th></tr>"
                    f"{rows}</table>")
    return ("<!doctype html><html><head><meta charset='utf-8'><title>seqlab inspect</title><style>"
            "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
            "td,th{border:1px solid #ccc;padding:3px 6px}img{max-width:100%}</style></head><body>"
            + "".join(body) + "</body></html>")


def mbr_candidates(model: Model, tokenizer: Tokenizer, source: str, cfg: DecodingConfig) -> str:
    """HTML: MBR's candidates for one source under `cfg` (a DecodingConfig with mbr), the choice marked."""
    assert cfg.mbr is not None
    choice = (decode_texts(model, tokenizer, [source], cfg, max_tokens=8000).mbr or [])[0]
    return f"<h2>MBR: {html.escape(cfg.label)}</h2>" + candidates_table(choice.to_dict(), cfg.mbr.utility, source,
                                                                        None, max_rows=len(choice.candidates))
