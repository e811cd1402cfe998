"""`device` settings: resolved in one place, CUDA asked for where there is none fails naming the key."""

from __future__ import annotations

import pytest
import torch

from seqlab.config import ConfigError, resolve_device


def test_auto_is_cuda_where_torch_sees_a_gpu_and_cpu_elsewhere(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("bench", "auto") == "cpu"
    assert resolve_device("bench", "cpu") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("bench", "auto") == "cuda"
    assert resolve_device("bench", "cuda:1") == "cuda:1"
    with pytest.raises(ConfigError, match=r"bench.device='cuda:2' but torch sees 2 CUDA device"):
        resolve_device("bench", "cuda:2")


def test_cuda_without_a_gpu_and_unknown_values_fail_naming_the_key(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    no_gpu = r"bench.device='cuda' but torch .* sees no CUDA device; use bench.device=cpu"
    with pytest.raises(ConfigError, match=no_gpu):
        resolve_device("bench", "cuda")
    with pytest.raises(ConfigError, match=r"^device='cuda:0' but"):
        resolve_device("", "cuda:0")
    for bad in ("gpu", "cuda:x", "mps"):
        with pytest.raises(ConfigError, match=r"use auto, cpu, cuda or cuda:N"):
            resolve_device("eval", bad)
