"""The whole training update — forward, loss, backward, gradient clipping, AdamW — replayed as a CUDA graph, one
graph per bucketed batch shape.

Why: at Transformer-base the archived GPU profile of a bf16 step has more host time than GPU time (Python and
~a thousand kernel launches per step), so the GPU waits. A CUDA graph replays a captured sequence of kernels with
one launch; it needs the same shapes and addresses at every replay. So each batch is padded to a bucket shape
(`bucket_shape`: rows and lengths rounded up, the padding rows carrying no target token, so the loss and the
gradients are those of the batch itself up to rounding), copied into that bucket's static buffers, and the
bucket's graph is replayed. The optimizer keeps its state on the device (`capturable`), the gradients stay
allocated between steps (zeroed inside the graph), and clipping computes its factor on the device, so nothing in
the step reads a value back to the host.

`capture=False` runs the same padded, static step without a graph, on any device: what the graph replays, so a
machine without a GPU tests everything but the capture.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from seqlab.bf16_gemm import bf16_gemms
from seqlab.config import ConfigError
from seqlab.constants import EOS_ID, PAD_ID

Batch = dict[str, Tensor]  # src (B, S) long, pad (B, S) bool (True at padding), tgt_in and tgt (B, T) long
# (batch) -> the mean loss over its target tokens: the step's arithmetic (levers.step_loss over its count)
LossFn = Callable[[Batch], Tensor]


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


@dataclass(frozen=True)
class Buckets:
    """Batch shapes rounded up: lengths to a multiple of `length`, rows to a multiple of `rows`. A token-budget
    batcher's batches then fall into a few shapes, each one graph."""

    length: int = 8
    rows: int = 8

    def __post_init__(self) -> None:
        if self.length < 1 or self.rows < 1:
            raise ConfigError(f"step graph buckets must be >= 1 (got length={self.length}, rows={self.rows})")

    def shape(self, batch: Batch) -> tuple[int, int, int]:
        """(rows, source length, target length) of the bucket `batch` falls in."""
        b, s = batch["src"].shape
        return round_up(b, self.rows), round_up(s, self.length), round_up(batch["tgt"].shape[1], self.length)


def pad_batch(batch: Batch, shape: tuple[int, int, int]) -> Batch:
    """`batch` padded to `shape`: new source columns are padding, new target columns are PAD (no loss); a new
    row is a one-token source (EOS: a row whose keys were all padding would be NaN in attention) with PAD
    targets only, so it adds nothing to the loss or to any gradient."""
    rows, src_len, tgt_len = shape
    b, s = batch["src"].shape
    t = batch["tgt"].shape[1]
    if (b, s, t) == shape:
        return batch
    device = batch["src"].device
    src = torch.full((rows, src_len), PAD_ID, dtype=batch["src"].dtype, device=device)
    pad = torch.ones(rows, src_len, dtype=torch.bool, device=device)
    src[:b, :s], pad[:b, :s] = batch["src"], batch["pad"]
    src[b:, 0], pad[b:, 0] = EOS_ID, False
    out = {"src": src, "pad": pad}
    for key in ("tgt_in", "tgt"):
        target = torch.full((rows, tgt_len), PAD_ID, dtype=batch[key].dtype, device=device)
        target[:b, :t] = batch[key]
        out[key] = target
    return out


class GraphedTrainStep:
    """One training update per call, `(batch) -> mean loss` (a device tensor the bucket's next replay overwrites:
    read it before), each bucket's step captured once and replayed. `optimizer` must keep its state on the
    device where it captures (AdamW(capturable=True)); its learning rate is captured as it is, so a schedule
    needs it as a device tensor that the schedule fills (AdamW(lr=torch.tensor(...), capturable=True)).
    `clip_norm`: gradients clipped by global norm first (fairseq's --clip-norm), None: not clipped."""

    def __init__(self, params: list[Tensor], loss_fn: LossFn, optimizer: torch.optim.Optimizer,
                 clip_norm: float | None = None, bf16: bool = False, buckets: Buckets = Buckets(),
                 capture: bool = True) -> None:
        device = params[0].device
        if capture and device.type != "cuda":
            raise ConfigError("a graphed training step replays CUDA graphs: train on a GPU, or capture=False")
        if capture and any(g.get("capturable") is False for g in optimizer.param_groups):
            raise ConfigError("a graphed training step needs the optimizer's state on the GPU: AdamW(capturable="
                              "True)")
        self.params, self.loss_fn, self.optimizer = params, loss_fn, optimizer
        self.clip_norm, self.bf16, self.buckets = clip_norm, bf16, buckets
        self.capture, self.device = capture, device
        self.static: dict[tuple[int, int, int], Batch] = {}  # bucket -> its input buffers
        self.graphs: dict[tuple[int, int, int], torch.cuda.CUDAGraph] = {}
        self.losses: dict[tuple[int, int, int], Tensor] = {}  # bucket -> the loss its graph writes

    def __call__(self, batch: Batch) -> Tensor:
        shape = self.buckets.shape(batch)
        padded = pad_batch(batch, shape)
        if shape not in self.static:
            self.static[shape] = {key: value.clone() for key, value in padded.items()}
            if self.capture:
                return self._capture(shape)
        for key, value in padded.items():
            self.static[shape][key].copy_(value)
        if not self.capture:
            return self._update(self.static[shape])
        self.graphs[shape].replay()
        return self.losses[shape]

    def _update(self, batch: Batch) -> Tensor:
        """The step the graph holds: gradients zeroed in place (they stay allocated), forward and loss,
        backward, clipping, the optimizer's update."""
        for p in self.params:
            if p.grad is not None:
                p.grad.zero_()
        device = self.device.type  # as the bench's eager update (bench.speed.run_train_step), its autocast uncached:
        with bf16_gemms(device, self.bf16):  # a graph must not keep casts the autocast context frees on exit
            with torch.autocast(device, dtype=torch.bfloat16, enabled=self.bf16, cache_enabled=False):
                loss = self.loss_fn(batch)
            loss.backward()
        if self.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.params, self.clip_norm, foreach=True)
        self.optimizer.step()
        return loss.detach()

    def _capture(self, shape: tuple[int, int, int]) -> Tensor:
        """The bucket's first batch updates eagerly, on a side stream (lazy initializations, the optimizer's
        state and the gradients' buffers stay out of the graph): the one update this batch makes. Then the
        same step is captured (a capture runs nothing) for the bucket's next batches."""
        batch = self.static[shape]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            loss = self._update(batch)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.losses[shape] = self._update(batch)
        self.graphs[shape] = graph
        return loss

    @property
    def captured(self) -> int:
        """Graphs captured so far (one per bucket met)."""
        return len(self.graphs)
