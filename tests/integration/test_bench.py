"""`make bench` end to end on a tiny model: both toolkits timed on the same batches, outputs compared."""

from __future__ import annotations

import torch
from pipelines.bench import format_table, run_bench

from seqlab.benchmark import BenchConfig, faster, train_flops

TINY = BenchConfig(d_model=32, n_heads=2, layers=1, d_ff=64, vocab=64, batch=4, seq_len=8, train_steps=2,
                   warmup_steps=1, train_repeats=2, decode_sources=4, max_new_tokens=5, num_beams=2,
                   decode_repeats=1)


def test_faster_keeps_the_run_with_more_tokens_per_second():
    slow, fast = {"tokens_per_s": 1.0}, {"tokens_per_s": 2.0}
    assert faster(None, slow) is slow
    assert faster(slow, fast) is fast
    assert faster(fast, slow) is fast


def test_run_bench_times_both_toolkits_and_their_outputs_agree():
    torch.manual_seed(0)
    r = run_bench(TINY, ckpt=None, scaling=False)
    assert r["outputs_identical"] is True  # same weights, same rules: HF generate and seqlab agree
    for name in ("greedy", "beam", "beam8"):
        assert r[name]["differing_sources"] == 0
        assert r[name]["generated_tokens"] > 0
        assert r[f"{name}_ratio"] == r[name]["hf_s"] / r[name]["seqlab_s"]
        assert 0 <= r[f"{name}_bf16"]["differing_from_fp32"] <= TINY.decode_sources
    model_cfg = TINY.model_config()
    assert r["train_flops_per_step"] == train_flops(model_cfg, TINY.batch, TINY.seq_len, TINY.seq_len)
    for tag in ("fp32", "bf16"):
        ours, theirs = r[f"train_{tag}"]["seqlab"], r[f"train_{tag}"]["hf"]
        assert ours["tokens_per_s"] > 0 and theirs["tokens_per_s"] > 0
        assert r[f"train_{tag}_ratio"] == ours["tokens_per_s"] / theirs["tokens_per_s"]
        assert r[f"mfu_{tag}"] == r["train_flops_per_step"] / ours["step_s"] / r[f"train_{tag}"]["matmul_peak_flops"]
    table = format_table(r)
    assert "train tok/s fp32" in table and "beam8 decode tok/s" in table and "outputs identical: True" in table
