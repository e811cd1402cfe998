"""The fine-tuning bench at shrunken shapes of its three families: every mode runs on both toolkits, LoRA trains
a sliver of the weights on both alike, and a mode whose state cannot fit is a skipped row, not a crash."""

from __future__ import annotations

import pytest

from seqlab.bench import finetune
from seqlab.bench.speed import BenchConfig

pytest.importorskip("peft")

SMALL = {name: (kind, values | dict(vocab_size=64, d_model=32), targets)
         for name, (kind, values, targets) in finetune.SHAPES.items()}
SIZES = {2: ("encoder_layers", "decoder_layers", "num_layers", "num_decoder_layers"),
         4: ("encoder_attention_heads", "decoder_attention_heads", "num_heads"),
         48: ("encoder_ffn_dim", "decoder_ffn_dim", "d_ff")}
for _, values, _ in SMALL.values():
    values.update({k: size for size, keys in SIZES.items() for k in keys if k in values})
    if "d_kv" in values:
        values["d_kv"] = 8


def test_every_mode_runs_on_both_toolkits_and_lora_trains_the_same_sliver():
    cfg = BenchConfig(batch=2, seq_len=6, train_steps=1, warmup_steps=1)
    rows = finetune.finetune_bench(cfg, SMALL, rounds=1, steps=2)
    assert [(r.shape, r.mode, r.side) for r in rows] == [(s, m, side) for s in SMALL for m in finetune.MODES
                                                          for side in ("seqlab", "hf")]
    assert all(r.skipped is None and r.step_s > 0 and r.peak_mb > 0 for r in rows)
    assert all(r.timing == "paired" and len(r.runs_s) == 2 for r in rows)  # small models: both fit together
    for shape in SMALL:
        mine = {r.mode: r for r in rows if r.shape == shape and r.side == "seqlab"}
        theirs = {r.mode: r for r in rows if r.shape == shape and r.side == "hf"}
        assert mine["full"].trainable == mine["full"].parameters
        # adapters on the attention projections: seqlab's fused q/k/v projection takes one (as peft's on GPT-2's
        # fused c_attn), Hugging Face's three apart, so seqlab trains fewer at the same r
        assert 0 < mine["lora"].trainable < theirs["lora"].trainable < theirs["lora"].parameters / 2
        assert mine["lora + checkpointing"].trainable == mine["lora"].trainable
    for mode, side in (("full", "hf"), ("lora", "seqlab")):  # no room for any full fine-tuning
        row = finetune.run_or_skip(cfg, "mbart-large", SMALL["mbart-large"], mode, side, available=0.01)
        assert (row.skipped is not None) == (mode == "full") and (row.step_s is None) == (mode == "full")
    assert "AdamW state need" in finetune.run_or_skip(cfg, "t5", SMALL["flan-t5-large"], "full", "seqlab", 0.01).skipped
    assert finetune.from_dict(finetune.to_dict(rows)) == rows


def test_the_toolkits_take_turns_and_a_row_keeps_its_sides_fastest_step_and_largest_peak(monkeypatch):
    calls = []
    steps = iter([3.0, 5.0, 2.0, 6.0])  # seqlab, hf, seqlab, hf

    def fake_run(cfg, shape, spec, mode, side, available):
        calls.append((mode, side))
        step = next(steps) if mode == "lora" else 1.0
        return finetune.FinetuneRun(shape, mode, side, 10, 2, 8 / step, step, 100 + 10 * step)

    monkeypatch.setattr(finetune, "run_or_skip", fake_run)
    monkeypatch.setattr(finetune, "MODES", ("lora",))
    rows = finetune.finetune_bench(BenchConfig(batch=2, seq_len=2), {"x": SMALL["mbart-large"]}, rounds=2, steps=0)
    assert calls == [("lora", "seqlab"), ("lora", "hf")] * 2
    mine, theirs = rows
    assert (mine.side, mine.step_s, mine.tokens_per_s, mine.peak_mb) == ("seqlab", 2.0, 4.0, 130.0)
    assert (theirs.side, theirs.step_s, theirs.peak_mb) == ("hf", 5.0, 160.0)
    assert (mine.runs_s, theirs.runs_s) == ([3.0, 2.0], [5.0, 6.0])  # every run kept, in turn
    skipped = finetune.FinetuneRun("x", "full", "hf", 10, 10, None, None, None, "no room")
    assert finetune.best_of([skipped, skipped]) == skipped


@pytest.mark.parametrize("peak_mb, timing", [(100.0, "paired"), (10_000.0, "turns")])
def test_both_models_step_in_turn_where_they_fit_together_else_the_runs_take_turns(monkeypatch, peak_mb, timing):
    """Each side runs alone for its peak; where the two peaks fit in FIT of the machine together, each row's step
    is the median of its side's alternating steps (paired_steps), its peak the run's alone; else more runs in
    turn, and the fastest."""
    alone = iter([2.0, 3.0, 1.5, 2.5])  # seqlab, hf, then the second round's

    def fake_run(cfg, shape, spec, mode, side, available):
        step = next(alone)
        return finetune.FinetuneRun(shape, mode, side, 10, 2, 8 / step, step, peak_mb)

    def fake_paired(cfg, spec, mode, steps):
        assert steps == 3
        return {"seqlab": [1.0, 4.0, 2.0], "hf": [3.0, 3.5, 2.5]}

    monkeypatch.setattr(finetune, "run_or_skip", fake_run)
    monkeypatch.setattr(finetune, "paired_steps", fake_paired)
    monkeypatch.setattr(finetune, "machine_mb", lambda: 12_000.0)
    monkeypatch.setattr(finetune, "MODES", ("lora",))
    mine, theirs = finetune.finetune_bench(BenchConfig(batch=2, seq_len=2), {"x": SMALL["mbart-large"]}, rounds=2,
                                           steps=3)
    assert (mine.timing, theirs.timing) == (timing, timing) and mine.peak_mb == theirs.peak_mb == peak_mb
    if timing == "paired":
        assert (mine.step_s, mine.runs_s, mine.tokens_per_s) == (2.0, [1.0, 4.0, 2.0], 4.0)
        assert (theirs.step_s, theirs.runs_s) == (3.0, [3.0, 3.5, 2.5])
    else:  # 20,000 MiB together do not fit 0.8 of 12,000: the second round's runs, the fastest of each side
        assert (mine.step_s, mine.runs_s, theirs.step_s, theirs.runs_s) == (1.5, [2.0, 1.5], 2.5, [3.0, 2.5])


@pytest.mark.parametrize("shape", list(SMALL))
def test_both_toolkits_train_without_randomness_so_they_time_the_same_step(shape):
    """No dropout and no LayerDrop on either side (NLLB's config skips layers at 0.05 by default): a
    training-mode step's loss is the same number twice."""
    from seqlab.bench.speed import hf_train_step, seqlab_train_step

    kind, values, targets = SMALL[shape]
    cfg = BenchConfig(batch=2, seq_len=6)
    batch = finetune.batches(cfg, values["vocab_size"], 1)[0]
    for model, step in ((finetune.seqlab_model(kind, values, "lora"), seqlab_train_step),
                        (finetune.hf_model(kind, values, "lora", targets), hf_train_step)):
        model.train()
        loss = step(model, 0.1)
        assert loss(batch).item() == loss(batch).item(), type(model).__name__
