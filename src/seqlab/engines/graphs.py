"""The decoder step as a CUDA graph, captured once per search and replayed at every step.

On a GPU a step of a Transformer decoder is bound by the host: each of its ~20 operators per layer is a
Python call and a kernel launch, and the archived GPU record (docs/performance.md "On a GPU") measured two
beam-5 searches at four times as much host time as GPU time. A CUDA graph replays a captured sequence of
kernels with one launch. It needs shapes and addresses that stay the same from step to step, so the
captured step is the model's `step_at` (the encoder-decoder's, or the one-stack model's after its prompt): its
position is a device tensor, attention reads the cache's whole capacity (later positions masked, and a one-stack
model's prompt padding), and it always computes the rows it was captured with. The searches
move rows in place in the same buffers (beams following their parents, finished rows leaving: `compact_`),
so a search keeps its graph; rows past the live ones compute numbers nobody reads.

A graph is captured when the step first meets a cache's buffers (the second step of a search: the first one
allocates them, and beam search's grows them to its beams), and again only if they move. Steps the graph
cannot take run eagerly: an encoder-decoder's first, one past the buffers' capacity, and those over a cache with
holes (a speculative search's, whose kept positions are per row).

The outputs are seqlab's search's up to rounding: attention sums over the masked positions too (adding
exact zeros, in another order), so a near-tie can break the other way, as between any two attention
kernels; the bench counts the outputs that differ from Hugging Face's.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch
from torch import Tensor

from seqlab.config import ConfigError
from seqlab.decoding.search import model_step
from seqlab.model import DecoderCache, DecodingModel, Model
from seqlab.model.cache import StaticCache, slabs


def check_graphable(model: DecodingModel, setting: str = "step graphs") -> None:
    """Fail, naming the reason, unless `model` can decode with a captured step."""
    if why := model.step_at_blocker():
        raise ConfigError(f"{setting}: {why}; use engine=seqlab for this model")


def autocast_uncached() -> AbstractContextManager:
    """The autocast in force, without its cache of cast weights: a graph must not keep pointers to casts that
    the autocast context frees when it exits (PyTorch's rule for capturing under autocast)."""
    if not torch.is_autocast_enabled("cuda"):
        return nullcontext()
    return torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"), cache_enabled=False)


class GraphedStep:
    """A StepFn (search.model_step's contract) that replays the decoder step as a CUDA graph.

    capture=False runs the same static step without a graph, on any device: what the graph replays, for tests
    on machines without a GPU.
    """

    def __init__(self, model: Model, capture: bool = True) -> None:
        check_graphable(model)
        if capture and next(model.parameters()).device.type != "cuda":
            raise ConfigError("step graphs are CUDA graphs: decode on a GPU (device=cuda), or use engine=seqlab")
        self.model, self.capture = model, capture
        self.eager = model_step(model)
        self.cache: StaticCache | None = None  # what the graph reads (held: the graph has its addresses)
        self.key: tuple[int, ...] = ()
        self.rows = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.captures = 0  # graphs captured so far (one per search, unless its buffers move)
        self.tokens = self.position = self.logits = torch.empty(0)

    @staticmethod
    def _key(cache: DecoderCache) -> tuple[int, ...]:
        """What a graph is bound to: the cache and the addresses of the buffers and per-source tensors it reads."""
        source = cache.cross_kv[0][0] if cache.cross_kv else cache.cross_mask  # a one-stack model's: its prompt's
        return id(cache), cache.layers[0].k.data_ptr(), source.data_ptr(), cache.group

    def __call__(self, last: Tensor, cache: DecoderCache) -> tuple[Tensor, DecoderCache]:
        """(N,) last tokens -> (N, V) fp32 logits; the cache advanced by one position."""
        layers = cache.layers
        if cache.length == 0 or cache.length >= layers[0].capacity or cache.valid is not None:
            return self.eager(last, cache)
        n = last.shape[0]
        if self._key(cache) != self.key or n > self.rows:
            self._bind(cache, n)
        self.tokens[:n].copy_(last)
        self.position.fill_(cache.length)
        if self.capture:
            if self.graph is None:
                self._capture()
            self.graph.replay()
        else:
            self.logits = self._run()
        for buffer in layers:
            buffer.length += 1
        return self.logits[:n], cache

    def _bind(self, cache: DecoderCache, rows: int) -> None:
        """Static inputs for a step over `rows` rows of `cache`; the old graph (and its memory) released."""
        self.graph = None
        self.cache, self.key, self.rows = cache.static(rows), self._key(cache), rows
        device = cache.cross_mask.device
        self.tokens = torch.zeros(rows, dtype=torch.long, device=device)
        self.position = torch.zeros(1, dtype=torch.long, device=device)
        for slab in slabs(cache.layers):
            slab.zero_from_(cache.length)

    def _run(self) -> Tensor:
        with autocast_uncached():
            return self.model.step_at(self.tokens[:, None], self.position, self.cache)[:, -1].float()

    def _capture(self) -> None:
        """Warm up on a side stream (lazy initializations stay out of the graph), then capture. The warm-up
        writes this step's keys/values, which the replay that follows writes again."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._run()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = self._run()
        self.captures += 1
