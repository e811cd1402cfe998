"""The CUDA paths, run where torch sees a GPU (`pytest -m gpu`): the bench on the device, training in
bf16-mixed with `trainer=gpu`, translation on the device. Deselected by default and skipped without CUDA."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_bench_runs_both_toolkits_on_the_gpu():
    from seqlab.analysis.bench import run_bench

    from .test_bench import TINY

    r = run_bench(replace(TINY, device="cuda"), ckpt=None, scaling=False)
    assert r.outputs_identical is True
    for t in r.train.values():
        assert t.seqlab.peak_mem_mb > 0  # CUDA's counter, not the host's RSS
        assert t.seqlab_sdpa is None  # attention_kernel=auto is SDPA on a GPU: nothing to compare
    assert set(r.decode["greedy"].engines) == {"bf16"}  # int8, oneDNN and CTranslate2 are CPU engines


def test_smoke_training_on_the_gpu_in_bf16_then_translation_there(make_cfg, tmp_path):
    from seqlab.app.train import train
    from seqlab.app.translate import run_translate

    result = train(make_cfg("train", ["experiment=smoke", "logger=none", "trainer=gpu", "train.quick_eval_size=0",
                                      "trainer.max_steps=2", "trainer.precision=bf16-mixed"]))  # smoke says 32
    assert result["step"] == 2
    source = tmp_path / "in.txt"
    source.write_text("En el principio creó Dios los cielos y la tierra.\nY la tierra estaba desordenada.\n")
    out = tmp_path / "out.txt"
    with out.open("w") as stdout:
        n = run_translate(make_cfg("translate", [f"ckpt={result['last']}", f"input={source}", "device=cuda",
                                                 "decoding.max_length=8"]), stdout=stdout)
    assert n == 2 and len(out.read_text().splitlines()) == 2
