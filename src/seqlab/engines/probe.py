"""engine=auto's probe: a short search of a random model, timed on seqlab's default engine and on oneDNN's.

Timing the products alone does not predict the search: on an AMD EPYC with AVX-512 the products of a beam
step run 1.17-1.3x faster on oneDNN's packed weights while whole searches of the families' shapes run
1.13-1.51x faster, and on an Intel Xeon with AMX products 1.14x faster gave a search 0.89-0.99x as fast.
A search also pays for what the engines do differently around the products (the packed layer's reshapes,
the fused ReLU, where each output lands in memory), and for the non-product work both share, which dilutes
the products' gain. So the probe runs the search itself: a fixed number of steps of a
random t5-small-sized encoder-decoder (d 512, 6 + 6 layers, 2,048-wide feed-forward, a 32k vocabulary: the
smallest of the pretrained families' shapes, where the non-product work weighs most) over random sources, in
the rows the command decodes, the two engines alternating, best of a few.
"""

from __future__ import annotations

import torch

from seqlab.decoding import DecodingConfig
from seqlab.decoding.engine import DecodeBatch, search
from seqlab.hardware import best_of, timed
from seqlab.model import Model, ModelConfig, Seq2SeqTransformer
from seqlab.model.onednn import onednn_linears

PROBE_MODEL = ModelConfig(src_vocab_size=32000, dropout=0.0)  # t5-small's size: d 512, 6 + 6 layers, ff 2,048
PROBE_SOURCE_LEN = 24  # tokens a source
PROBE_STEPS = 6  # new tokens a search: every row runs them all (min_length = max_length)
BATCH_SOURCES = 16  # a batch's sources; one source a call probes 1
BATCH_ROWS = 320  # at most this many rows in a batch's probe (many rows a source: fewer sources)


def batch_sources(rows_per_source: int) -> int:
    """The sources a batch's probe decodes: BATCH_SOURCES, fewer where each takes many rows (MBR's samples,
    wide beams), so that the probe stays a few seconds."""
    return max(1, min(BATCH_SOURCES, BATCH_ROWS // rows_per_source))


def search_speedup(rows_per_source: int, sources: int, repeats: int = 2, shape: ModelConfig = PROBE_MODEL) -> float:
    """The default engine's time over oneDNN's for a search of `sources` random sources in `rows_per_source`
    rows each (1: greedy, k: beam k), on this machine with torch's current threads: > 1 means oneDNN is faster.
    A first search on each engine warms it (the allocator's heap, oneDNN's kernels) and is not timed."""
    g = torch.Generator().manual_seed(0)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model: Model = Seq2SeqTransformer(shape).eval()
    packed = onednn_linears(model)
    src = torch.randint(4, shape.src_vocab_size, (sources, PROBE_SOURCE_LEN), generator=g)
    decoding = DecodingConfig(method="beam" if rows_per_source > 1 else "greedy", num_beams=rows_per_source,
                              min_length=PROBE_STEPS, max_length=PROBE_STEPS, early_stopping=True)
    batch = DecodeBatch(src, torch.zeros_like(src, dtype=torch.bool), decoding)
    with torch.inference_mode():
        runs = {name: (lambda m=m: timed(lambda: search(m, batch))) for name, m in (("mkl", model), ("onednn", packed))}
        best_of(runs, 1)
        best = best_of(runs, repeats)
    return best["mkl"][1] / best["onednn"][1]
