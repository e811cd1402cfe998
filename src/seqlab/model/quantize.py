"""int8 decoding on a CPU: the linear layers with int8 weights and dynamically quantized activations."""

from __future__ import annotations

import copy
import warnings

import torch
from torch import Tensor, nn

from seqlab.model.layers import fuse_relu
from seqlab.model.transformer import Seq2SeqTransformer


def dynamic_int8(model: Seq2SeqTransformer) -> Seq2SeqTransformer:
    """A copy of `model` whose nn.Linear layers (attention projections, feed-forward, output) hold int8
    weights (per-tensor scale) and quantize their inputs per batch: PyTorch's dynamic quantization,
    run by its x86 (fbgemm/oneDNN) int8 kernels, the feed-forward ReLU fused into the first. Embeddings,
    norms, softmax and the search stay fp32.

    The original model is untouched (a tied output layer gets its own int8 copy of the embedding).
    """
    with warnings.catch_warnings():  # torch.ao's eager-mode API warns that torchao will replace it
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        quantized = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model).cpu().eval(), {nn.Linear},
                                                           dtype=torch.qint8)
    fuse_relu(quantized, Int8LinearReLU)
    return quantized


class Int8LinearReLU(nn.Module):
    """A dynamically quantized int8 linear layer with the ReLU after it in the same kernel (PyTorch's
    `linear_relu_dynamic`, as its LinearReLU module runs it): the same numbers as relu(linear(x))."""

    def __init__(self, linear: nn.Module) -> None:
        super().__init__()
        self.linear = linear  # torch.ao.nn.quantized.dynamic.Linear

    def forward(self, x: Tensor) -> Tensor:
        packed = self.linear._packed_params._packed_params
        return torch.ops.quantized.linear_relu_dynamic(x, packed, reduce_range=True).to(x.dtype)
