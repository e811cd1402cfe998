"""int8 decoding on a CPU: the linear layers with int8 weights and dynamically quantized activations."""

from __future__ import annotations

import copy
import itertools
import warnings
import weakref
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.hardware import cpu_flags
from seqlab.model.causal import CausalTransformer
from seqlab.model.layers import fuse_relu, replace_layers
from seqlab.model.products import plain_linears
from seqlab.model.transformer import Seq2SeqTransformer

VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


def full_range_activations(flags: set[str] | None = None) -> bool:
    """Whether activations may use all 8 bits here: where the CPU has VNNI (or AMX), int8 products
    accumulate in 32 bits. Without it, fbgemm's kernels add pairs of u8 x s8 products in 16 bits
    (vpmaddubsw), which saturates unless activations keep to 7 bits: PyTorch's `reduce_range`, the
    default of its dynamic linear layer. On the bench's CPU 8 bits keep 46-50 of 64 outputs equal to
    fp32's, 7 bits 39 (docs/performance.md)."""
    return bool(VNNI_FLAGS & (cpu_flags() if flags is None else flags))


# Every live Int8Linear by its key. torch.compile cannot take a packed int8 weight (a TorchScript object) into a
# program, so a compiled Int8Linear passes its key to `seqlab::int8_linear`, an operator the compiler keeps whole,
# which runs that layer's own eager product: the same kernel on the same weight, the activations' quantization
# included (engines.compiled).
_LAYERS: weakref.WeakValueDictionary[int, Int8Linear] = weakref.WeakValueDictionary()
_KEYS = itertools.count()
_LIBRARY = torch.library.Library("seqlab", "DEF")
_LIBRARY.define("int8_linear(Tensor x, int key) -> Tensor")
_LIBRARY.impl("int8_linear", lambda x, key: _LAYERS[key].product(x), "CPU")
torch.library.register_fake("seqlab::int8_linear", lambda x, key: x.new_empty(
    (*x.shape[:-1], _LAYERS[key].linear.out_features)), lib=_LIBRARY)


class Int8Linear(nn.Module):
    """PyTorch's dynamically quantized linear layer (int8 weights, activations quantized per call), with
    the activation range chosen for this CPU, and optionally the ReLU after it in the same kernel
    (`linear_relu_dynamic`: the same numbers as relu(linear(x))). Compiled, it runs its product through
    `seqlab::int8_linear` (above)."""

    def __init__(self, linear: nn.Module, relu: bool = False, reduce_range: bool | None = None) -> None:
        super().__init__()
        self.linear = linear  # torch.ao.nn.quantized.dynamic.Linear: holds the packed int8 weight
        self.relu = relu
        self.reduce_range = not full_range_activations() if reduce_range is None else reduce_range
        self._register()

    def _register(self) -> None:
        self.key = next(_KEYS)
        _LAYERS[self.key] = self

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A copy (copy.deepcopy, pickle) holds a packed weight of its own: it gets a key of its own."""
        super().__setstate__(state)
        self._register()

    def product(self, x: Tensor) -> Tensor:  # (..., in) -> (..., out)
        op = torch.ops.quantized.linear_relu_dynamic if self.relu else torch.ops.quantized.linear_dynamic
        return op(x, self.linear._packed_params._packed_params, reduce_range=self.reduce_range).to(x.dtype)

    def forward(self, x: Tensor) -> Tensor:
        if torch.compiler.is_compiling():
            return torch.ops.seqlab.int8_linear(x, self.key)
        return self.product(x)


def dynamic_int8(model: Seq2SeqTransformer | CausalTransformer) -> Seq2SeqTransformer | CausalTransformer:
    """A copy of `model` whose nn.Linear layers (attention projections, feed-forward, output) hold int8
    weights (per-tensor scale) and quantize their inputs per call (`Int8Linear`): PyTorch's dynamic
    quantization, run by its x86 (fbgemm) int8 kernels, the feed-forward ReLU fused into the first layer.
    Embeddings, norms, softmax and the search stay fp32.

    The original model is untouched (a tied output layer gets its own int8 copy of the embedding).
    """
    with warnings.catch_warnings():  # torch.ao's eager-mode API warns that torchao will replace it
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        plain = copy.deepcopy(model).cpu().eval()
        plain_linears(plain)  # the quantizer swaps nn.Linear by its exact class
        quantized = torch.ao.quantization.quantize_dynamic(plain, {nn.Linear}, dtype=torch.qint8)
    reduce_range = not full_range_activations()
    replace_layers(quantized, torch.ao.nn.quantized.dynamic.Linear,
                   lambda linear: Int8Linear(linear, reduce_range=reduce_range))
    fuse_relu(quantized, lambda fc1: Int8Linear(fc1.linear, relu=True, reduce_range=reduce_range))
    return quantized
