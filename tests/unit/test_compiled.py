"""The compiled CPU step (engines.compiled): the static step of engines.graphs through torch.compile decodes what
the eager step decodes, one source a call as in a batch, an encoder-decoder and a one-stack model, compiling once
for sources of every length, one row on the model's own products and more on its oneDNN copy; what it cannot
take is refused by name before anything compiles."""

from __future__ import annotations

import pytest
import torch

from seqlab.config import ConfigError
from seqlab.decoding import DecodingConfig, generate
from seqlab.decoding.ensemble import check_members
from seqlab.decoding.labels import run_label
from seqlab.engines.choice import check_engine
from seqlab.engines.compiled import CompiledEngine
from seqlab.model import ModelConfig, Seq2SeqTransformer
from seqlab.model.onednn import onednn_available

from ..helpers import needs_onednn, toy_batch, trained_toy_model

GREEDY = DecodingConfig(max_length=12)
BEAM = DecodingConfig(method="beam", num_beams=4, max_length=12)


def one_a_call(engine, model, src, pad, cfg):
    """Each source alone, trimmed of its padding, as `seqlab translate` reading a stream decodes: the first
    hypothesis of each."""
    out = []
    for row, mask in zip(src, pad, strict=True):
        n = int((~mask).sum())
        got = engine.generate(model, row[None, :n], mask[None, :n], cfg)
        out.append(got.sequences[0, 0, : got.lengths[0, 0]].tolist())
    return out


def firsts(out) -> list[list[int]]:
    return [out.sequences[i, 0, : out.lengths[i, 0]].tolist() for i in range(out.sequences.shape[0])]


def test_what_the_compiled_engine_cannot_take_is_refused_by_name():
    with pytest.raises(ConfigError, match="eval.engine=seqlab_compiled compiles the fp32 or int8 step; use "
                                          "eval.precision=fp32 or int8 with it, or engine=seqlab for precision=bf16"):
        check_engine("eval", "seqlab_compiled", "bf16", DecodingConfig())
    for precision in ("fp32", "int8"):
        check_engine("eval", "seqlab_compiled", precision, DecodingConfig())
    with pytest.raises(ConfigError, match="engine=seqlab_compiled compiles the fp32 or int8 step, not precision=bf16"):
        CompiledEngine(trained_toy_model(), "bf16")
    with pytest.raises(ConfigError, match="engine=seqlab_compiled runs a one-token step, which decoding.draft"):
        check_engine("translate", "seqlab_compiled", "fp32", DecodingConfig(draft="lookup"))
    coverage = DecodingConfig(method="beam", num_beams=2, coverage_penalty="wu", coverage_beta=0.2)
    with pytest.raises(ConfigError, match="engine=seqlab_compiled does not record attention"):
        check_engine("eval", "seqlab_compiled", "fp32", coverage)
    with pytest.raises(ConfigError, match="eval.ensemble: engine=seqlab_compiled decodes one model"):
        check_members(BEAM, "seqlab_compiled", "eval")
    copying = Seq2SeqTransformer(ModelConfig(src_vocab_size=40, d_model=32, n_heads=4, d_ff=64, encoder_layers=1,
                                             decoder_layers=1, copy_attention=True))
    with pytest.raises(ConfigError, match="engine=seqlab_compiled: copy attention is not a plain output projection"):
        CompiledEngine(copying)
    assert run_label("greedy", "fp32", "seqlab_compiled") == "greedy_compiled"
    assert run_label("greedy", "int8", "seqlab_compiled") == "greedy_int8_compiled"


def test_each_models_compiled_step_has_its_own_code_object():
    """Dynamo counts a code object's programs against one recompile limit (8): five models of two searches each
    in one process (the one-source bench's) would exceed it if their steps shared one."""
    from seqlab.engines.compiled import compile_step

    steps = [compile_step(trained_toy_model()) for _ in range(2)]
    assert steps[0]._torchdynamo_orig_callable.__code__ is not steps[1]._torchdynamo_orig_callable.__code__


def test_the_compiled_step_decodes_what_the_eager_step_decodes_one_source_a_call_and_in_a_batch():
    """Sources of different lengths one a call (the source's length a symbol from the first compile: two
    compiles at most for all of them), then a batch with rows finishing at different steps, and beam search (more
    rows: the program of the model's copy on oneDNN's packed weights). Inductor's caches off: every program
    compiled as on a fresh machine, where an earlier build failed in its shape guards once the rows changed."""
    from torch._dynamo.utils import counters

    model = trained_toy_model()
    src, pad, *_ = toy_batch(torch.Generator().manual_seed(1), 8, 40)
    assert len({int((~m).sum()) for m in pad}) > 2
    torch._dynamo.reset()
    engine = CompiledEngine(model)
    counters.clear()  # the step's programs only, not the tuning's (model.one_row)
    with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=False, autotune_local_cache=False):
        assert one_a_call(engine, model, src, pad, GREEDY) == [firsts(generate(model, s[None, :int((~m).sum())],
                                                                                m[None, :int((~m).sum())], GREEDY))[0]
                                                               for s, m in zip(src, pad, strict=True)]
        assert counters["stats"]["unique_graphs"] <= 2
        assert engine.packed is None  # one row: the model's own products, no packed program compiled
        for cfg in (GREEDY, BEAM):
            eager, compiled = generate(model, src, pad, cfg), engine.generate(model, src, pad, cfg)
            assert torch.equal(eager.sequences, compiled.sequences)
            torch.testing.assert_close(eager.token_logprobs, compiled.token_logprobs, rtol=1e-4, atol=1e-4)
    assert (engine.packed is not None) == onednn_available()  # more rows: the oneDNN copy's frozen program


def test_a_one_stack_models_compiled_step_decodes_what_its_eager_step_decodes():
    """A decoder-only LM in Llama's layout (RoPE, grouped-query attention) one prompt a call, prompts of different
    lengths sharing one program (the prompt's length is a shape of the step's inputs, not a number it is
    specialized to), then over right-padded prompts, greedy and beam."""
    from torch._dynamo.utils import counters

    from tests.unit.test_causal import batch, model_of

    model = model_of("decoder_only", norm_position="pre", norm="rmsnorm", gated_ffn=True, activation="silu",
                     bias=False, positions="rope", kv_heads=2)
    src, pad, _ = batch(3)
    assert len({int((~m).sum()) for m in pad}) == 3
    torch._dynamo.reset()
    engine = CompiledEngine(model)
    counters.clear()  # the step's programs only, not the tuning's (model.one_row)
    with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=False, autotune_local_cache=False):
        alone = [firsts(generate(model, s[None, :int((~m).sum())], m[None, :int((~m).sum())], GREEDY))[0]
                 for s, m in zip(src, pad, strict=True)]
        assert one_a_call(engine, model, src, pad, GREEDY) == alone
        assert counters["stats"]["unique_graphs"] <= 2
        for cfg in (GREEDY, BEAM):
            eager, compiled = generate(model, src, pad, cfg), engine.generate(model, src, pad, cfg)
            assert torch.equal(eager.sequences, compiled.sequences)
    assert (engine.packed is not None) == onednn_available()


@pytest.mark.parametrize("way", [pytest.param("onednn", marks=needs_onednn), "reduction"])
def test_one_row_steps_take_the_tuned_products_on_a_copy_that_shares_the_models_weights(monkeypatch, way):
    """The engine tunes its one-row products (model.one_row.tune_one_row) on a copy of the model's modules: the
    caller's model keeps its own products, no weight is copied, and a compiled step whose every layer takes one
    row through oneDNN, or through Inductor's own loop, decodes what the eager step decodes."""
    import seqlab.engines.compiled as compiled
    from seqlab.model.one_row import one_row_layers
    from seqlab.model.products import WEIGHT_LEFT, Linear

    def every_shape_one_way(model):
        for layers in one_row_layers(model).values():
            for m in layers:
                m.one_row = way
        return {shape: {way: 2.0} for shape in one_row_layers(model)}

    monkeypatch.setattr(compiled, "tune_one_row", every_shape_one_way)
    model = trained_toy_model()
    src, pad, *_ = toy_batch(torch.Generator().manual_seed(2), 4, 40)
    engine = CompiledEngine(model)
    assert all(a is b for a, b in zip(model.parameters(), engine.one_row.parameters(), strict=True))
    assert {m.one_row for m in model.modules() if isinstance(m, Linear)} == {WEIGHT_LEFT}
    assert {m.one_row for m in engine.one_row.modules() if isinstance(m, Linear)} == {way}
    with torch.no_grad():
        want = [firsts(generate(model, s[None, :int((~m).sum())], m[None, :int((~m).sum())], GREEDY))[0]
                for s, m in zip(src, pad, strict=True)]
        assert one_a_call(engine, model, src, pad, GREEDY) == want


def test_the_int8_compiled_step_decodes_what_the_eager_int8_engine_decodes():
    """precision=int8: the search and its compiled step on the engine's int8 copy, whose every product is the
    eager int8 layer's kernel (`seqlab::int8_linear`), so one source a call (every row of the step live: an int8
    product quantizes its activations over all of its rows), on a trained model (its choices further apart than
    int8's rounding moves them), it decodes what the eager engine decodes on the same copy, greedy and beam; the
    caller's fp32 model is untouched, and it is the model the engine was made for."""
    from seqlab.model.quantize import Int8Linear

    model = trained_toy_model()
    weights = [p.clone() for p in model.parameters()]
    src, pad, *_ = toy_batch(torch.Generator().manual_seed(3), 6, 40)
    engine = CompiledEngine(model, "int8")
    int8 = engine.searched
    assert int8 is not model and any(isinstance(m, Int8Linear) for m in int8.modules())
    assert engine.copy is None and engine.program_for(1) is engine.own  # a program for each number of rows
    assert engine.program_for(4) is engine.program_for(4) is not engine.own
    with torch.no_grad():
        for cfg in (GREEDY, BEAM):
            want = [firsts(generate(int8, s[None, :int((~m).sum())], m[None, :int((~m).sum())], cfg))[0]
                    for s, m in zip(src, pad, strict=True)]
            assert one_a_call(engine, model, src, pad, cfg) == want
        assert engine.generate(model, src, pad, GREEDY).sequences.shape[0] == 6  # a batch decodes too
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters(), strict=True))
    with pytest.raises(ValueError, match="this engine compiled another model's step"):
        engine.generate(int8, src, pad, GREEDY)
