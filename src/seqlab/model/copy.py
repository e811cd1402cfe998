"""Copy attention: a pointer-generator output layer (See et al. 2017, "Get To The Point").

The decoder's distribution becomes a mixture of generating from the vocabulary
and copying a source token:

    p(w) = g * softmax(logits)_w + (1 - g) * sum_{s : src_s = w} a_s,
    g = sigmoid(w_g . h + b_g),  a = softmax_s((W_q h) . (W_k m_s) / sqrt(d))

with h the decoder's final state and m the encoder output. Source and target
share one vocabulary, so a copied source id is a target id. The gate reads h
alone (h already carries the decoder's cross-attention context); See et al. also
feed the context vector and the input embedding, fairseq feeds the input embedding.

Why: extreme summarization rewrites names and rare words of the document that a
small model, trained for minutes, cannot yet generate from its vocabulary; copying
them is a single attention lookup.

A model with copy attention returns log-probabilities instead of logits. Every
consumer takes a log-softmax or a softmax of the output, which leaves
log-probabilities unchanged, so training, decoding and scoring need no other change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from seqlab.model.config import ModelConfig

TINY = 1e-30  # floor for probabilities before the log: keeps log and its gradient finite


@dataclass
class CopySource:
    """What copying needs from one batch of sources, kept once per source."""

    keys: Tensor  # (G, S, d): projected encoder output
    ids: Tensor  # (G, S): source token ids


class PointerGenerator(nn.Module):
    """Mixes the vocabulary distribution with a copy distribution over the source."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.query = nn.Linear(d, d)
        self.key = nn.Linear(d, d)
        self.gate = nn.Linear(d, 1)
        self.scale = 1.0 / math.sqrt(d)

    def source(self, memory: Tensor, src_ids: Tensor) -> CopySource:
        """Copy keys for memory (G, S, d) and its ids (G, S), computed once per source."""
        return CopySource(self.key(memory), src_ids)

    def forward(
        self,
        h: Tensor,  # (B, T, d): decoder final states
        logits: Tensor,  # (B, T, V)
        src: CopySource,  # per source: (B / group, S, ...)
        allowed: Tensor,  # (B / group, 1, 1, S) bool, True where a source position may be attended
        group: int = 1,  # consecutive rows sharing one source (beams)
    ) -> Tensor:
        """Log-probabilities (B, T, V) of the mixture, computed in float32."""
        b, t, _ = h.shape
        sources, s = src.ids.shape
        q = self.query(h).view(sources, group * t, -1)  # one source's rows form one group of queries
        scores = torch.bmm(q, src.keys.transpose(1, 2)).float() * self.scale  # (G, K*T, S)
        scores = scores.masked_fill(~allowed[:, 0], float("-inf"))
        attn = scores.softmax(dim=-1).view(b, t, s)
        ids = src.ids if group == 1 else src.ids.repeat_interleave(group, 0)  # (B, S)
        p_gen = torch.sigmoid(self.gate(h).float())  # (B, T, 1)
        probs = p_gen * logits.float().softmax(dim=-1)  # (B, T, V)
        probs = probs.scatter_add(2, ids[:, None, :].expand(b, t, s), (1.0 - p_gen) * attn)
        return probs.clamp_min(TINY).log()
