"""The families' decoding bench at shrunken shapes: every engine decodes the same sources, and seqlab's
outputs (its oneDNN engine's too) equal generate's and CTranslate2's (the speeds are the bench's business,
not a test's)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from seqlab.bench import families as bench_families  # noqa: E402
from seqlab.bench.speed import BenchConfig  # noqa: E402


def test_every_family_shape_decodes_alike_in_every_engine(monkeypatch):
    small = {}
    for name, (kind, values) in bench_families.SHAPES.items():
        values = {**values, "d_model": 32, "vocab_size": 512}  # the vocabulary too: the test's time is its rows
        if values.get("pad_token_id") == 58100:  # Marian's pad and decoder start: the vocabulary's last id
            values.update(pad_token_id=511, decoder_start_token_id=511)
        if kind == "t5":
            values.update(d_kv=8, d_ff=64, num_layers=2, num_heads=4)
        else:
            values.update(encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                          encoder_ffn_dim=64, decoder_ffn_dim=64)
        small[name] = (kind, values)
    monkeypatch.setattr(bench_families, "SHAPES", small)
    monkeypatch.setattr(bench_families, "ONE_AT_A_TIME", 4)
    rows = bench_families.family_bench(BenchConfig(decode_sources=6, seq_len=10, max_new_tokens=8), repeats=1)
    assert [(r.shape, r.decoding, r.one_at_a_time) for r in rows] == [
        (s, d, singly) for s in small for d, _ in bench_families.DECODINGS for singly in (False, True)]
    for r in rows:  # one source a call: the first 4, each trimmed of its padding, decoded as in the batch
        assert r.equal_hf == r.sources == (4 if r.one_at_a_time else 6), r
        assert r.equal_ct2 in (None, r.sources), r
        assert r.equal_onednn in (None, r.sources) and (r.onednn_s is None) == (r.equal_onednn is None), r
    assert bench_families.from_dict(bench_families.to_dict(rows)) == rows
    old = {k: v for k, v in bench_families.to_dict(rows)[0].items() if not k.endswith("onednn") and k != "onednn_s"}
    assert bench_families.from_dict([old])[0].onednn_x_ct2 is None  # a record from before the oneDNN column


def test_the_causal_lm_bench_decodes_as_generate_does(monkeypatch):
    """seqlab's right-padded batch against generate's left-padded one, and CTranslate2's Generator's greedy
    outputs, at shrunken GPT-2 and Llama shapes; then the first prompts one per call, each unpadded."""
    from seqlab.bench import causal as bench_causal

    small = {"gpt2": ("gpt2", dict(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=1,
                                   eos_token_id=2)),
             "llama": ("llama", dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                     bos_token_id=1, eos_token_id=2, pad_token_id=2)),
             # an instruct model's two end tokens and chat-laid-out prompts (the bench's qwen2.5-instruct row)
             "qwen_chat": ("qwen2", dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                         tie_word_embeddings=True, bos_token_id=1, eos_token_id=[2, 1],
                                         pad_token_id=1))}
    monkeypatch.setattr(bench_families, "ONE_AT_A_TIME", 3)
    rows = bench_causal.causal_bench(BenchConfig(decode_sources=5, seq_len=10, max_new_tokens=8), repeats=1,
                                     shapes=small, chat={"qwen_chat": (6, 3)})
    assert [(r.shape, r.decoding, r.one_at_a_time) for r in rows] == [
        (s, d, singly) for s in small for d, _ in bench_families.DECODINGS for singly in (False, True)]
    assert all(r.equal_hf == r.sources == (3 if r.one_at_a_time else 5) for r in rows), rows
    greedy = [r for r in rows if r.decoding == "greedy"]  # CTranslate2's Generator, where installed
    assert all(r.equal_ct2 in (None, r.sources) and (r.ct2_s is None) == (r.equal_ct2 is None) for r in greedy), rows
    oned = [r for r in rows if r.onednn_s is not None]  # seqlab's oneDNN engine, where torch has it
    assert all(r.equal_onednn == r.sources for r in oned if r.decoding == "greedy"), oned


def test_the_architectures_train_at_equal_layer_parameters_on_the_same_batches():
    """The bench's decoder-only and prefix LMs hold the encoder-decoder's layer parameters to within a few (the
    d_ff of conf/model/decoder_only_small.yaml at the reference shape); each row's MFU is its FLOPs over its
    time, and the one stack over 80 tokens costs more FLOPs than 3 + 3 layers over 40 and 40."""
    from omegaconf import OmegaConf

    from seqlab.bench import architectures

    shapes = architectures.architecture_models(BenchConfig())
    assert {s.d_ff for s in list(shapes.values())[1:]} == {OmegaConf.load("conf/model/decoder_only_small.yaml").d_ff}
    rows = architectures.architecture_training(BenchConfig(d_model=32, n_heads=2, layers=1, d_ff=64, vocab=50,
                                                           batch=4, seq_len=6, train_steps=1, warmup_steps=1,
                                                           train_repeats=1))
    assert [r.architecture for r in rows[:3]] == list(architectures.ARCHITECTURES)
    counts = {r.layer_parameters for r in rows}
    assert max(counts) - min(counts) < 2 * 32  # within one unit of d_ff of the stack
    encoder_decoder, decoder_only = rows[0], rows[1]
    assert decoder_only.step_flops > encoder_decoder.step_flops
    assert all(r.mfu == r.step_flops / r.step_s / r.matmul_peak_flops and r.tokens_per_s > 0 for r in rows)
    assert architectures.from_dict(architectures.to_dict(rows)) == rows


def test_the_architectures_decode_the_same_sources_to_the_same_forced_length():
    """Every architecture, greedy and beam, at each source length: every output is max_new_tokens long (the end
    token neither before nor after), so each row's tokens are sources x that length and only the architecture
    differs between the rows of one source length and search."""
    from seqlab.bench import architectures

    cfg = BenchConfig(d_model=32, n_heads=2, layers=1, d_ff=64, vocab=50, seq_len=6, decode_sources=3,
                      max_new_tokens=5, num_beams=3, decode_repeats=1)
    rows = architectures.architecture_decoding(cfg)
    lengths = [max(1, round(s * cfg.seq_len)) for s in architectures.SOURCE_SCALES]
    assert [(r.source_tokens, r.decoding, r.architecture) for r in rows] == [
        (n, d, a) for n in lengths for d in ("greedy", "beam3") for a in architectures.ARCHITECTURES]
    assert all(r.sources == 3 and r.tokens == 3 * 5 and r.seconds > 0 for r in rows), rows
    assert architectures.decode_from_dict(architectures.to_dict(rows)) == rows


def test_the_causal_bench_times_the_shapes_named_and_refuses_an_unknown_one():
    from seqlab.bench import causal
    from seqlab.config import ConfigError

    assert list(causal.pick_shapes([])) == list(causal.SHAPES)  # the base shapes; the instruct one on its own
    assert "qwen2.5-0.5b-instruct" not in causal.SHAPES
    assert list(causal.pick_shapes(["qwen2.5-0.5b-instruct"])) == ["qwen2.5-0.5b-instruct"]
    with pytest.raises(ConfigError, match="no causal shape 'qwen3'; known: gpt2, smollm-135m"):
        causal.pick_shapes(["gpt2", "qwen3"])
