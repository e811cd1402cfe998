"""int8 decoding on a CPU: the linear layers with int8 weights and dynamically quantized activations."""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from seqlab.model.transformer import Seq2SeqTransformer


def dynamic_int8(model: Seq2SeqTransformer) -> Seq2SeqTransformer:
    """A copy of `model` whose nn.Linear layers (attention projections, feed-forward, output) hold int8
    weights (per-tensor scale) and quantize their inputs per batch: PyTorch's dynamic quantization,
    run by its x86 (fbgemm/oneDNN) int8 kernels. Embeddings, norms, softmax and the search stay fp32.

    The original model is untouched (a tied output layer gets its own int8 copy of the embedding).
    """
    with warnings.catch_warnings():  # torch.ao's eager-mode API warns that torchao will replace it
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        return torch.ao.quantization.quantize_dynamic(copy.deepcopy(model).cpu().eval(), {nn.Linear},
                                                      dtype=torch.qint8)
