"""The model's linear layers (seqlab.model.products): a few rows without gradients on a CPU are the same product
taken as (W x^T)^T, within fp32 rounding of F.linear; everything else is F.linear itself."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seqlab.model import products
from seqlab.model.products import FEW_ROWS, ONEDNN, Linear, linear, plain_linears

from ..helpers import needs_onednn


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 7), (2, 7), (5, 1, 7), (3, 4, 7), (17, 7), (4, 32, 7), (129, 7), (300, 7)])
def test_few_rows_are_the_same_product_and_the_rest_is_f_linear(shape, bias):
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(11, 7, generator=g), torch.randn(11, generator=g) if bias else None
    x = torch.randn(*shape, 7, generator=g)[..., 0, :] if len(shape) == 1 else torch.randn(*shape, generator=g)
    with torch.no_grad():
        out = linear(x, w, b)
    want = F.linear(x, w, b)
    assert out.shape == want.shape and out.is_contiguous()
    rows = x.numel() // 7
    if rows in FEW_ROWS:
        torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-6)
    else:
        assert torch.equal(out, want)


def test_gradients_autocast_and_other_types_take_f_linear(monkeypatch):
    calls = []
    monkeypatch.setattr(products.torch, "mm", lambda *a: calls.append("mm") or torch.matmul(*a))
    monkeypatch.setattr(products.torch, "addmm", lambda *a: calls.append("addmm"))
    w, b, x = torch.randn(4, 3, requires_grad=True), torch.randn(4), torch.randn(5, 3)
    linear(x, w, b).sum().backward()  # gradients on: F.linear, and its gradient reaches the weight
    assert w.grad is not None and not calls
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        linear(x, w, b)
    with torch.no_grad():
        linear(x.double(), w.double(), b.double())
    assert not calls
    with torch.no_grad():
        linear(x, w, None)
    assert calls == ["mm"]


def test_the_layer_is_an_nn_linear_and_plain_linears_gives_the_exact_class_back():
    torch.manual_seed(0)
    layer = Linear(3, 4)
    twin = nn.Linear(3, 4)
    twin.load_state_dict(layer.state_dict())  # the same names
    x = torch.randn(2, 3)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), twin(x), rtol=1e-6, atol=1e-6)
    model = nn.Sequential(layer, nn.ReLU(), nn.Sequential(Linear(4, 2)))
    plain = copy.deepcopy(model)
    plain_linears(plain)
    assert [type(m) for m in plain.modules() if isinstance(m, nn.Linear)] == [nn.Linear, nn.Linear]
    assert type(model[0]) is Linear  # the original is untouched
    quantized = torch.ao.quantization.quantize_dynamic(plain, {nn.Linear}, dtype=torch.qint8)
    assert not any(isinstance(m, nn.Linear) for m in quantized.modules())  # every layer found by its class


def test_one_row_is_taken_beside_a_zero_row_as_a_matrix_product(monkeypatch):
    """MKL's matrix-vector product reads the weights on one thread: a single row goes with a zero row beside it,
    so the product is a matrix product (two columns), and only the row's own result comes back."""
    shapes = []
    mm = torch.mm
    monkeypatch.setattr(products.torch, "mm", lambda a, b: shapes.append(tuple(b.shape)) or mm(a, b))
    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(11, 7, generator=g), torch.randn(1, 1, 7, generator=g)
    with torch.no_grad():
        out = linear(x, w, None)
    assert shapes == [(7, 2)] and out.shape == (1, 1, 11)
    torch.testing.assert_close(out, F.linear(x, w), rtol=1e-6, atol=1e-6)


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
def test_one_row_through_onednn_is_the_same_product_and_more_rows_keep_the_weight_left(bias, monkeypatch):
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(11, 7, generator=g), torch.randn(11, generator=g) if bias else None
    with torch.no_grad():
        for shape in [(1, 7), (1, 1, 7)]:
            x = torch.randn(*shape, generator=g)
            out = linear(x, w, b, ONEDNN)
            assert out.shape == (*shape[:-1], 11)
            torch.testing.assert_close(out, F.linear(x, w, b), rtol=1e-6, atol=1e-6)
        monkeypatch.setattr(products.torch.ops.mkldnn, "_linear_pointwise", None)  # any call would fail
        x = torch.randn(3, 7, generator=g)
        torch.testing.assert_close(linear(x, w, b, ONEDNN), F.linear(x, w, b), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bias", [True, False])
def test_one_row_as_a_reduction_is_the_same_product_compiled_and_weight_left_eagerly(bias, monkeypatch):
    """REDUCTION is a sum of products for Inductor to compile into one loop: compiled, the same product; eagerly
    (where it would build the (out, in) products whole) the weight-left product; more rows never take it."""
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(11, 7, generator=g), torch.randn(11, generator=g) if bias else None
    compiled = torch.compile(lambda x: linear(x, w, b, products.REDUCTION), fullgraph=True, dynamic=False)
    with torch.no_grad():
        for shape in [(1, 7), (1, 1, 7)]:
            x = torch.randn(*shape, generator=g)
            torch.testing.assert_close(compiled(x), F.linear(x, w, b), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(linear(x, w, b, products.REDUCTION), linear(x, w, b), rtol=0, atol=0)
        x = torch.randn(3, 7, generator=g)
        with monkeypatch.context() as patched:
            patched.setattr(products.torch.Tensor, "sum", None)  # any sum would fail
            out = linear(x, w, b, products.REDUCTION)
        torch.testing.assert_close(out, F.linear(x, w, b), rtol=1e-6, atol=1e-6)
