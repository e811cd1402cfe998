"""Step graphs (engines.graphs): the static decoder step a CUDA graph replays, run without a graph here. The
searches decode the same sequences with it as with the eager step, rows finishing and beams moving in place
within one set of buffers; models it cannot take are refused by name. The captured graphs themselves run in
tests/integration/test_gpu.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from seqlab.config import ConfigError
from seqlab.decoding import DecodingConfig, generate
from seqlab.decoding.ensemble import Ensemble
from seqlab.decoding.search import model_step
from seqlab.engines.graphs import GraphedStep, check_graphable
from seqlab.model import ModelConfig, Seq2SeqTransformer

from ..helpers import toy_batch, trained_toy_model

SETTINGS = {
    "greedy": DecodingConfig(max_length=12),
    "beam4": DecodingConfig(method="beam", num_beams=4, max_length=12),
    "beam4_nbest": DecodingConfig(method="beam", num_beams=4, max_length=12, n_best=4),
    "diverse": DecodingConfig(method="beam", num_beams=4, num_beam_groups=2, diversity_penalty=0.5, max_length=12),
    "sample": DecodingConfig(method="sample", n_best=3, max_length=12, seed=3),
}


def static_generate(model, src, pad, cfg):
    """generate() with the static step in place of the eager one, counting the steps it took."""
    steps = []

    def counted(m):
        steps.append(GraphedStep(m, capture=False))
        return steps[-1]

    return generate(model, src, pad, cfg, step=counted), steps[0]


@pytest.mark.parametrize("name", list(SETTINGS))
def test_the_static_step_decodes_what_the_eager_step_decodes(name):
    model = trained_toy_model()
    src, pad, *_ = toy_batch(torch.Generator().manual_seed(1), 16, 40)
    cfg = SETTINGS[name]
    with torch.no_grad():
        eager = generate(model, src, pad, cfg)
        static, step = static_generate(model, src, pad, cfg)
    assert step.rows > 0  # the static step ran (after the first step, which allocates the buffers)
    lengths = eager.lengths.flatten()
    assert lengths.min() < lengths.max()  # rows finished at different steps: compaction ran under the static step
    assert torch.equal(eager.sequences, static.sequences)
    torch.testing.assert_close(eager.scores, static.scores, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(eager.token_logprobs, static.token_logprobs, rtol=1e-5, atol=1e-5)


def test_one_step_writes_the_eager_keys_and_values_and_logits():
    """One step after a prefix of 3 tokens: the same logits and the same cached keys/values at position 3;
    the positions after it stay zeros (attention reads them, masked)."""
    model = trained_toy_model().eval()
    src, pad, *_ = toy_batch(torch.Generator().manual_seed(2), 5, 40)
    prefix = torch.randint(4, 40, (5, 4), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        memory = model.encode(src, pad)
        caches = [model.start_cache(memory, pad, capacity=10) for _ in range(2)]
        for cache in caches:
            model.decode(prefix[:, :3], None, None, cache)
        eager, _ = model_step(model)(prefix[:, 3], caches[0])
        static, _ = GraphedStep(model, capture=False)(prefix[:, 3], caches[1])
    torch.testing.assert_close(static, eager, rtol=1e-5, atol=1e-5)
    for a, b in zip(caches[0].layers, caches[1].layers, strict=True):
        assert a.length == b.length == 4
        for static_kv, eager_kv in zip(b.live(), a.live(), strict=True):  # (rows, H, 4, Dh) each
            torch.testing.assert_close(static_kv, eager_kv, rtol=1e-6, atol=1e-6)
        assert not b.k[:, :, 4:].any() and not b.v[:, :, 4:].any()  # (slots, H, capacity, Dh) buffers


@pytest.mark.parametrize("variant", [
    dict(positions="learned", position_offset=2, layernorm_embedding=True, scale_embedding=False),  # BART's
    dict(positions="none"),
    dict(norm="rmsnorm", gated_ffn=True, activation="silu", bias=False, norm_position="pre"),
    dict(positions="rope", norm_position="pre"),
    dict(positions="alibi"),
    dict(positions="t5", scale_attention=False, t5_buckets=8, t5_max_distance=16),  # T5's, buckets reached
])
def test_the_static_step_under_other_variants(variant):
    cfg = replace(ModelConfig(src_vocab_size=40, d_model=32, n_heads=4, d_ff=64, encoder_layers=2,
                              decoder_layers=2, dropout=0.0, max_positions=64), **variant)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(cfg).eval()
    src, pad, *_ = toy_batch(torch.Generator().manual_seed(1), 6, 40)
    for setting in ("greedy", "beam4"):
        with torch.no_grad():
            eager = generate(model, src, pad, SETTINGS[setting])
            static, _ = static_generate(model, src, pad, SETTINGS[setting])
        assert torch.equal(eager.sequences, static.sequences)
        torch.testing.assert_close(eager.scores, static.scores, rtol=1e-5, atol=1e-5)


ONE_STACK = [dict(positions="learned"),  # GPT-2's
             dict(norm_position="pre", norm="rmsnorm", gated_ffn=True, activation="silu", bias=False,
                  positions="rope", kv_heads=2),  # Llama's, grouped-query
             dict(positions="alibi"), dict(positions="t5", architecture="prefix_lm")]


@pytest.mark.parametrize("variant", ONE_STACK, ids=[repr(v) for v in ONE_STACK])
def test_a_one_stack_models_static_step_decodes_what_its_eager_step_decodes(variant):
    """Right-padded prompts of different lengths (the padding masked inside the static step's keys, each new
    token's position counted over its own prompt's real tokens), rows finishing and beams moving."""
    from tests.unit.test_causal import batch, model_of

    model = model_of(**{"architecture": "decoder_only", **variant})
    src, pad, _ = batch(3)
    for name in ("greedy", "beam4", "sample"):
        with torch.no_grad():
            eager = generate(model, src, pad, SETTINGS[name])
            static, step = static_generate(model, src, pad, SETTINGS[name])
        assert step.rows > 0, name
        assert torch.equal(eager.sequences, static.sequences), name
        torch.testing.assert_close(eager.token_logprobs, static.token_logprobs, rtol=1e-5, atol=1e-5)


def test_copy_attention_and_ensembles_are_refused_by_name():
    model = Seq2SeqTransformer(ModelConfig(src_vocab_size=40, d_model=32, n_heads=4, d_ff=64,
                                           encoder_layers=1, decoder_layers=1, copy_attention=True))
    with pytest.raises(ConfigError, match="copy attention is not a plain output projection; use engine=seqlab"):
        check_graphable(model)
    with pytest.raises(ConfigError, match="an ensemble decodes with each model's own step"):
        check_graphable(Ensemble([model, model]))


def test_graphs_need_a_gpu_and_no_coverage_penalty():
    model = trained_toy_model()
    with pytest.raises(ConfigError, match="step graphs are CUDA graphs: decode on a GPU"):
        GraphedStep(model)
    src, pad, *_ = toy_batch(torch.Generator().manual_seed(1), 2, 40)
    cfg = DecodingConfig(method="beam", num_beams=2, coverage_penalty="wu", coverage_beta=0.2, max_length=5)
    with pytest.raises(ConfigError, match="a coverage penalty records the attention at every step"):
        generate(model, src, pad, cfg, step=GraphedStep)


@pytest.mark.parametrize("name", ["bart", "mbart", "pegasus", "m2m_100", "t5_v1.0", "t5_v1.1", "marian"])
def test_every_imported_family_decodes_with_the_static_step_as_transformers_does(name, tmp_path):
    """The families' own generation settings (their position offsets, scaled embeddings, T5's relative bias,
    forced tokens, bans): beam search over the static step gives transformers' outputs."""
    pytest.importorskip("transformers")
    from tests.hf_families import batch, ids_of
    from tests.unit.test_family_generate import SETTINGS, hf_and_ours, tokens

    hf, ours, decoding = hf_and_ours(name, tmp_path, SETTINGS[name])
    pad, eos, _ = ids_of(name)
    ids, mask = batch(name, seed=2, b=3, s=7)
    with torch.no_grad():
        expected = hf.generate(input_ids=ids, attention_mask=(~mask).long())
        got, step = static_generate(ours, ids, mask, decoding)
    assert step.rows > 0
    for b in range(ids.shape[0]):
        assert tokens(got.sequences[b, 0], pad, eos) == tokens(expected[b, 1:], pad, eos), (name, b)


def test_the_graphs_engine_is_checked_before_loading_and_labelled():
    from seqlab.decoding.labels import run_label
    from seqlab.engines.choice import check_engine

    for precision in ("fp32", "bf16"):
        check_engine("eval", "seqlab_graphs", precision, DecodingConfig())
    with pytest.raises(ConfigError, match="eval.engine=seqlab_graphs captures the fp32 or bf16 step"):
        check_engine("eval", "seqlab_graphs", "int8", DecodingConfig())
    coverage = DecodingConfig(method="beam", num_beams=2, coverage_penalty="summary", coverage_beta=0.2)
    with pytest.raises(ConfigError, match="translate.engine=seqlab_graphs does not record attention"):
        check_engine("translate", "seqlab_graphs", "fp32", coverage)
    assert run_label("beam5_lp1", "bf16", "seqlab_graphs") == "beam5_lp1_bf16_graphs"
