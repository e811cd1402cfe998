"""Model variants: build, train a step, cache, causality, padding, parameter counts, bad configs."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from seqlab.constants import PAD_ID
from seqlab.model import ConfigError, ModelConfig, Seq2SeqTransformer
from seqlab.model.params import analytic_counts, count_parameters

VARIANTS = list(itertools.product(["pre", "post"], ["sinusoidal", "learned"], ["none", "decoder", "all"],
                                  [True, False]))
VARIANTS += list(itertools.product(["pre", "post"], ["rope", "alibi", "t5", "none"], ["decoder"], [True]))


def tiny(norm="post", positions="sinusoidal", tie="decoder", scale=True, **kw) -> ModelConfig:
    base = dict(src_vocab_size=50, tgt_vocab_size=None if tie == "all" else 60, d_model=16, n_heads=4,
                encoder_layers=2, decoder_layers=2, d_ff=32, dropout=0.0, max_positions=64,
                norm_position=norm, positions=positions, tie_embeddings=tie, scale_embedding=scale)
    base.update(kw)
    return ModelConfig(**base)


def batch(cfg: ModelConfig, b=3, s=7, t=6):
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, cfg.src_vocab_size, (b, s), generator=g)
    tgt = torch.randint(4, cfg.target_vocab_size, (b, t), generator=g)
    pad = torch.zeros(b, s, dtype=torch.bool)
    pad[0, -2:] = True  # mixed source lengths
    src[pad] = PAD_ID
    return src, pad, tgt


@pytest.mark.parametrize(("norm", "positions", "tie", "scale"), VARIANTS)
def test_every_variant_trains_a_step(norm, positions, tie, scale):
    cfg = tiny(norm, positions, tie, scale, dropout=0.1)
    model = Seq2SeqTransformer(cfg)
    src, pad, tgt = batch(cfg)
    logits = model(src, pad, tgt[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten())
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize(("norm", "positions", "tie", "scale"), VARIANTS)
def test_parameter_count_matches_formula(norm, positions, tie, scale):
    extras = [{}, {"layernorm_embedding": True, "final_norm": True, "output_bias": True}]
    if tie == "all":  # copy attention needs the shared vocabulary
        extras.append({"copy_attention": True})
    for extra in extras:
        cfg = tiny(norm, positions, tie, scale, **extra)
        model = Seq2SeqTransformer(cfg)
        assert count_parameters(model) == analytic_counts(cfg)
        assert sum(p.numel() for p in model.parameters()) == analytic_counts(cfg).total
        if cfg.copy_attention:
            assert analytic_counts(cfg).copy == 2 * 16 * 16 + 3 * 16 + 1


def test_tied_modes_share_storage():
    m = Seq2SeqTransformer(tiny(tie="all"))
    ptr = m.output.weight.data_ptr()
    assert m.src_embed.tokens.weight.data_ptr() == ptr == m.tgt_embed.tokens.weight.data_ptr()
    m = Seq2SeqTransformer(tiny(tie="decoder"))
    assert m.tgt_embed.tokens.weight.data_ptr() == m.output.weight.data_ptr()
    assert m.src_embed.tokens.weight.data_ptr() != m.output.weight.data_ptr()
    m = Seq2SeqTransformer(tiny(tie="none"))
    assert len({m.src_embed.tokens.weight.data_ptr(), m.tgt_embed.tokens.weight.data_ptr(),
                m.output.weight.data_ptr()}) == 3


def test_base_config_is_near_the_papers_65m():
    cfg = ModelConfig(src_vocab_size=37000, tie_embeddings="all")
    assert 60e6 < analytic_counts(cfg).total < 66e6


# Every variant without copy attention, and copy attention (shared vocabulary) under both norms.
CACHE_CASES = [(*v, False) for v in VARIANTS] + [("pre", "sinusoidal", "all", True, True),
                                                 ("post", "learned", "all", True, True)]


@pytest.mark.parametrize(("norm", "positions", "tie", "scale", "copy"), CACHE_CASES)
def test_incremental_cache_equals_teacher_forcing(norm, positions, tie, scale, copy):
    cfg = tiny(norm, positions, tie, scale, copy_attention=copy)
    model = Seq2SeqTransformer(cfg).eval()
    src, pad, tgt = batch(cfg)
    with torch.no_grad():
        memory = model.encode(src, pad)
        full, _ = model.decode(tgt, memory, pad, src_ids=src)
        cache = model.start_cache(memory, pad, src_ids=src)
        steps = []
        for t in range(tgt.shape[1]):
            logits, cache = model.decode(tgt[:, t : t + 1], None, None, cache)
            steps.append(logits)
        assert (torch.cat(steps, 1) - full).abs().max() <= 1e-5
        # Reorder the cache halfway, as beam search does, and continue.
        perm = torch.tensor([2, 0, 0])
        cache = model.start_cache(memory, pad, src_ids=src)
        _, cache = model.decode(tgt[:, :3], None, None, cache)  # a multi-token prefix
        cache = cache.reorder(perm)
        rest, _ = model.decode(tgt[perm, 3:], None, None, cache)
        ref, _ = model.decode(tgt[perm], memory[perm], pad[perm], src_ids=src[perm])
        assert (rest - ref[:, 3:]).abs().max() <= 1e-5


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_causality(norm):
    cfg = tiny(norm)
    model = Seq2SeqTransformer(cfg).eval()
    src, pad, tgt = batch(cfg)
    with torch.no_grad():
        base = model(src, pad, tgt)
        for t in range(tgt.shape[1]):
            changed = tgt.clone()
            changed[:, t] = (changed[:, t] + 1) % cfg.target_vocab_size
            out = model(src, pad, changed)
            assert torch.equal(out[:, :t], base[:, :t]) or (out[:, :t] - base[:, :t]).abs().max() <= 1e-6
            assert (out[:, t:] - base[:, t:]).abs().max() > 0


@pytest.mark.parametrize(("norm", "positions"), [("pre", "learned"), ("post", "sinusoidal"), ("pre", "rope"),
                                               ("post", "alibi"), ("pre", "t5"), ("post", "none")])
def test_padding_leaves_real_positions_unchanged(norm, positions):
    cfg = tiny(norm, positions)
    model = Seq2SeqTransformer(cfg).eval()
    src, pad, tgt = batch(cfg)
    with torch.no_grad():
        base = model(src, pad, tgt)
        src_p = torch.cat([src, torch.full((3, 4), PAD_ID)], 1)
        pad_p = torch.cat([pad, torch.ones(3, 4, dtype=torch.bool)], 1)
        tgt_p = torch.cat([tgt, torch.full((3, 5), PAD_ID)], 1)
        out = model(src_p, pad_p, tgt_p)
    assert (out[:, : tgt.shape[1]] - base).abs().max() <= 1e-5


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"norm_position": "middle"}, "model.norm_position='middle' is not valid; use one of ['pre', 'post']"),
        ({"positions": "rotary"}, "model.positions='rotary'"),
        ({"tie_embeddings": "encoder"}, "model.tie_embeddings='encoder'"),
        ({"d_model": 100, "n_heads": 8}, "model.d_model=100 is not divisible by model.n_heads=8"),
        ({"tie_embeddings": "all", "tgt_vocab_size": 70}, "joint vocabulary"),
        ({"dropout": 1.5}, "model.dropout=1.5 must be in [0, 1)"),
        ({"encoder_layers": 0}, "model.encoder_layers=0 must be at least 1"),
        ({"copy_attention": True, "tgt_vocab_size": 70, "tie_embeddings": "decoder"}, "copy_attention=true"),
    ],
)
def test_bad_configs_fail_at_construction(overrides, message):
    base = dict(src_vocab_size=50, d_model=16, n_heads=4)
    base.update(overrides)
    with pytest.raises(ConfigError, match=None) as err:
        ModelConfig(**base)
    assert message in str(err.value)


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match="norm_positon"):
        ModelConfig.from_dict({"src_vocab_size": 10, "norm_positon": "pre"})


def test_too_long_input_says_what_to_do():
    model = Seq2SeqTransformer(tiny())
    src = torch.full((1, 65), 5)
    with pytest.raises(ValueError, match="max_positions=64"):
        model.encode(src, torch.zeros_like(src, dtype=torch.bool))


@pytest.mark.parametrize("copy", [False, True])
def test_grouped_cache_equals_repeated_memory(copy):
    """Beams share one copy of their source's cross keys/values (and copy state); results equal full repetition."""
    cfg = tiny("pre", "learned", tie="all" if copy else "decoder", copy_attention=copy)
    model = Seq2SeqTransformer(cfg).eval()
    src, pad, tgt = batch(cfg, b=2)
    group = 3
    rows = (tgt[:, :4].repeat_interleave(group, 0) + torch.arange(2 * group)[:, None]) % cfg.target_vocab_size
    with torch.no_grad():
        memory = model.encode(src, pad)
        grouped = model.start_cache(memory, pad, group=group, src_ids=src)
        flat = model.start_cache(memory.repeat_interleave(group, 0), pad.repeat_interleave(group, 0),
                                 src_ids=src.repeat_interleave(group, 0))
        for t in range(rows.shape[1]):
            a, grouped = model.decode(rows[:, t : t + 1], None, None, grouped)
            b, flat = model.decode(rows[:, t : t + 1], None, None, flat)
            assert (a - b).abs().max() <= 1e-5
        # Beams trade places within their source (in place), then one source is dropped.
        order = torch.tensor([2, 2, 0, 4, 3, 3])
        grouped.compact_(order)
        flat = flat.reorder(order)
        nxt = rows[order, -1:]
        a, grouped = model.decode(nxt, None, None, grouped)
        b, flat = model.decode(nxt, None, None, flat)
        assert (a - b).abs().max() <= 1e-5
        keep = torch.tensor([3, 4, 5])
        a, _ = model.decode(nxt[keep], None, None, grouped.reorder(keep))
        b, _ = model.decode(nxt[keep], None, None, flat.reorder(keep))
        assert (a - b).abs().max() <= 1e-5
        c, _ = model.decode(nxt[keep], None, None, grouped.ungroup().reorder(keep))
        assert (a - c).abs().max() <= 1e-5
        with pytest.raises(ValueError, match="single source"):
            grouped.reorder(torch.tensor([0, 1, 3, 3, 4, 5]))
        grouped.compact_(keep)  # what searches do: the same rows, moved in place
        d, grouped = model.decode(nxt[keep], None, None, grouped)
        assert torch.equal(a, d)


def test_cache_moves_only_the_positions_a_row_lacks():
    """compact_ copies a row's positions from kept[i] on and leaves the first kept[i] as they are."""
    from seqlab.model.cache import DecoderCache

    h, dh = 2, 4
    cross = torch.zeros(2, h, 3, dh)
    cache = DecoderCache(((cross, cross.clone()),), torch.ones(2, 1, 1, 3, dtype=torch.bool), group=2, capacity=4)
    k = torch.randn(4, h, 3, dh)
    cache.layers[0].append(k, -k)
    cache.compact_(torch.tensor([1, 1, 2, 2]), torch.tensor([2, 3, 3, 0]))
    got_k, got_v = cache.layers[0].live()
    want = torch.stack([torch.cat([k[0, :, :2], k[1, :, 2:]], dim=1), k[1], k[2], k[2]])
    assert torch.equal(got_k, want) and torch.equal(got_v, -want)
    cache.compact_(torch.tensor([2, 3]))  # example 1 takes example 0's slot: copied whole
    assert torch.equal(cache.layers[0].live()[0], want[2:]) and cache.cross_mask.shape[0] == 1


def test_in_place_order_moves_only_the_last_rows_into_holes():
    from seqlab.model.cache import in_place_order, shared_prefix

    keep = torch.tensor([True, False, True, False, True, True])
    assert in_place_order(keep).tolist() == [0, 4, 2, 5]
    assert in_place_order(torch.ones(3, dtype=torch.bool)).tolist() == [0, 1, 2]
    prefix = torch.tensor([[1, 2, 3], [1, 2, 4], [1, 5, 3]])
    assert shared_prefix(prefix, torch.tensor([1, 0, 0])).tolist() == [2, 2, 1]


def test_buffer_grows_past_its_capacity():
    """Appending past the capacity keeps every earlier step (the buffer doubles)."""
    from seqlab.model.cache import KVBuffer

    steps = [torch.randn(3, 2, 1, 4) for _ in range(5)]
    buf = KVBuffer(capacity=2)
    for x in steps:
        k, v = buf.append(x, -x)
    assert buf.k.shape[2] == 8 and torch.equal(k, torch.cat(steps, dim=2)) and torch.equal(v, -k)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_math_attention_equals_the_fused_kernel(norm):
    """The CPU path (matmul, softmax, matmul) and SDPA: logits and gradients within 1e-5 in fp32;
    in bf16 autocast within 0.05 of the logits' scale (bf16 keeps 8 bits of mantissa)."""
    from dataclasses import replace

    cfg = tiny(norm, tie="all")
    models = {}
    for kernel in ("sdpa", "math"):
        torch.manual_seed(0)
        models[kernel] = Seq2SeqTransformer(replace(cfg, attention_kernel=kernel))
    src, pad, tgt = batch(cfg)
    out, grads = {}, {}
    for kernel, model in models.items():
        logits = model(src, pad, tgt[:, :-1])
        logits.float().logsumexp(-1).sum().backward()
        out[kernel] = logits.detach()
        grads[kernel] = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert (out["sdpa"] - out["math"]).abs().max() <= 1e-5
    assert (grads["sdpa"] - grads["math"]).abs().max() <= 1e-5
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = {k: m(src, pad, tgt[:, :-1]).float() for k, m in models.items()}
    scale = out["sdpa"].abs().max()
    assert (low["sdpa"] - low["math"]).abs().max() <= 0.05 * scale
    assert (low["math"] - out["math"]).abs().max() <= 0.05 * scale


def test_auto_kernel_is_math_on_cpu_in_bf16_only(monkeypatch):
    """"auto" calls the fused kernel in fp32 and not under CPU bf16 autocast; "sdpa" always does."""
    calls = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    for kernel, bf16, fused in (("auto", False, True), ("auto", True, False), ("sdpa", True, True),
                                ("math", False, False)):
        calls.clear()
        cfg = tiny(attention_kernel=kernel)
        src, pad, tgt = batch(cfg)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            Seq2SeqTransformer(cfg)(src, pad, tgt[:, :-1])
        assert bool(calls) == fused, (kernel, bf16)


@pytest.mark.parametrize("seed", range(4))
def test_row_moves_read_every_row_before_overwriting_it(seed):
    """A slab's row moves (beams taking their parents' positions, cycles and chains among them) give what copying
    from an untouched copy gives, both as per-row copies (a CPU) and as one gather (other devices)."""
    from seqlab.model.cache import copy_rows_, gather_rows_

    g = torch.Generator().manual_seed(seed)
    rows, length = 12, 7
    data = torch.randn(4, rows, 2, 9, 3, generator=g)  # (2L, slots, H, capacity, Dh)
    index = torch.randint(0, rows, (rows,), generator=g)
    index[:3] = torch.tensor([1, 2, 0])  # a cycle of three
    start = torch.randint(0, length, (rows,), generator=g)
    expected = data.clone()
    for t, (s, a) in enumerate(zip(index.tolist(), start.tolist(), strict=True)):
        expected[:, t, :, a:length] = data[:, s, :, a:length]
    moved = torch.arange(rows)
    by_copies, by_gather = data.clone(), data.clone()
    copy_rows_(by_copies, moved.tolist(), index.tolist(), start.tolist(), length)
    gather_rows_(by_gather, moved, index, start, length)
    assert torch.equal(by_copies, expected) and torch.equal(by_gather, expected)
