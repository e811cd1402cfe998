"""One engine protocol (decoding.engine): every engine decodes a DecodeBatch; `generate`'s signature is written
once (BaseEngine); seqlab's own search carries its precision, so a caller cannot decode bf16 requests in fp32."""

from __future__ import annotations

import torch

import seqlab.decoding.engine as engine_module
from seqlab.data.sequences import pad_right
from seqlab.decoding import DecodingConfig, generate
from seqlab.decoding.engine import BaseEngine, DecodeBatch, SearchEngine
from seqlab.engines.choice import GraphEngine, VariantEngine
from seqlab.engines.ct2 import CT2Engine
from seqlab.model import ModelConfig, build_model

TINY = ModelConfig(src_vocab_size=20, d_model=16, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=32,
                   dropout=0.0, max_positions=32)


def test_every_engine_serves_the_protocol_and_none_copies_generate():
    for kind in (SearchEngine, VariantEngine, GraphEngine, CT2Engine):
        assert issubclass(kind, BaseEngine) and "decode" in vars(kind) and "generate" not in vars(kind), kind


def test_seqlab_search_decodes_in_its_own_precision(monkeypatch):
    seen = []

    def recording(*args, **kwargs):
        seen.append(torch.is_autocast_enabled("cpu"))
        return generate(*args, **kwargs)

    monkeypatch.setattr(engine_module, "generate", recording)
    torch.manual_seed(0)
    model = build_model(TINY).eval()
    src, pad = pad_right([[5, 6, 8, 3], [9, 3]], 0)
    batch = DecodeBatch(src, pad, DecodingConfig(max_length=5))
    plain = SearchEngine("fp32").decode(model, batch)
    SearchEngine("bf16").decode(model, batch)
    assert seen == [False, True]
    assert torch.equal(plain.sequences, generate(model, src, pad, batch.cfg).sequences)
    assert torch.equal(SearchEngine().generate(model, src, pad, batch.cfg).sequences, plain.sequences)
