"""bf16 matrix products on CPUs that have no bf16 kernels: fp32 products of the bf16 operands.

PyTorch multiplies bf16 matrices on a CPU with oneDNN where the CPU has AVX512 (bf16 instructions, AMX, or
an AVX512 emulation), and otherwise with a scalar fallback: on an AVX2-only AMD EPYC (Zen 3) a 1024^3 GEMM ran
at 0.8 GFLOP/s in bf16 against 61 in fp32, so a bf16-mixed training step of the study's model took over 20x
its fp32 time, the products 97% of it. A recipe pinned to bf16-mixed (the trained study's) cannot run there.

The products' arithmetic does not need the bf16 kernels. A bf16 GEMM multiplies bf16 operands, sums in fp32
and rounds the sum to bf16 once. A product of two bf16 numbers (8-bit significands) is exact in fp32 (24), so
casting the operands to fp32, multiplying with the fp32 kernel and rounding the result to bf16 is the same
computation; only the order of the fp32 sums differs, as it differs between oneDNN's AVX512-BF16 and AMX
kernels. `Bf16GemmsInFp32` does that below autograd and autocast (a dispatch mode), so the forward's and the
backward's products both take the fp32 kernel and every other op, every dtype and every gradient stay as
they were. tests/unit/test_bf16_gemm.py holds it against the native kernels.

Not covered: PyTorch's fused CPU attention kernel (`model.attention_kernel=sdpa`), which rounds its own
intermediates; the default in bf16 on a CPU is the written-out attention, whose products are these.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

log = logging.getLogger(__name__)

_aten = torch.ops.aten
# The products autocast sends to bf16 (linear and matmul reach the dispatcher as these).
GEMMS = frozenset({_aten.mm.default, _aten.addmm.default, _aten.bmm.default, _aten.baddbmm.default,
                   _aten.addbmm.default, _aten.mv.default, _aten.addmv.default, _aten.dot.default})


def native_bf16_gemms() -> bool:
    """Whether this CPU multiplies bf16 matrices with oneDNN (AVX512 and later) rather than the scalar fallback."""
    return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def _is_bf16_cpu(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16 and x.device.type == "cpu"


class Bf16GemmsInFp32(TorchDispatchMode):
    """Within this mode a CPU product whose tensor operands are all bf16 runs as the fp32 product of their
    fp32 copies, rounded to bf16 (the bf16 kernel's arithmetic; module docstring)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        # GEMMS' overloads take flat operands and no `out=`; every other op passes straight through
        if func in GEMMS and all(_is_bf16_cpu(a) for a in args if isinstance(a, torch.Tensor)):
            upcast = [a.float() if isinstance(a, torch.Tensor) else a for a in args]
            return func(*upcast, **kwargs).to(torch.bfloat16)
        return func(*args, **kwargs)


def bf16_gemms(device_type: str, bf16: bool) -> AbstractContextManager:
    """The context bf16 work on `device_type` runs in: `Bf16GemmsInFp32` on a CPU without bf16 kernels,
    nothing elsewhere or when `bf16` is False."""
    if not bf16 or device_type != "cpu" or native_bf16_gemms():
        return nullcontext()
    _say_once()
    return Bf16GemmsInFp32()


@contextmanager
def bf16_autocast(device_type: str, enabled: bool = True) -> Iterator[None]:
    """torch.autocast to bf16 on `device_type` (nothing when not `enabled`), its products through
    `bf16_gemms`: every bf16-mixed forward seqlab runs outside Lightning (decoding, the benches)."""
    with torch.autocast(device_type, dtype=torch.bfloat16, enabled=enabled), bf16_gemms(device_type, enabled):
        yield


@functools.cache
def _say_once() -> None:
    log.info("bf16 on a CPU without bf16 matrix kernels (no AVX512): products run as fp32 products of the bf16 "
             "operands, rounded to bf16 - the same arithmetic at fp32 speed (seqlab.bf16_gemm)")
