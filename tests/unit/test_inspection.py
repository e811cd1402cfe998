"""Attention maps and decoding traces: weights are distributions with masked positions at 0, outputs unchanged."""

from __future__ import annotations

import torch

from seqlab.decoding import DecodingConfig, generate
from seqlab.inference.inspection import record_attention
from tests.helpers import toy_batch, trained_toy_model


def test_recording_attention_leaves_outputs_identical_and_gives_distributions():
    model = trained_toy_model(steps=20)
    g = torch.Generator().manual_seed(3)
    src, pad, tgt = toy_batch(g, 4, 40)
    tgt_in = torch.cat([torch.full_like(tgt[:, :1], 2), tgt[:, :-1]], 1)
    with torch.no_grad():
        plain = model(src, pad, tgt_in)
        with record_attention(model) as found:
            recorded = model(src, pad, tgt_in)
    assert torch.equal(plain, recorded), "asking for the weights must not change the outputs"
    assert [len(found[k]) for k in ("encoder", "decoder_self", "cross")] == [2, 2, 2]
    for kind, keys_pad in (("encoder", pad), ("cross", pad), ("decoder_self", None)):
        for w in found[kind]:
            assert torch.allclose(w.sum(-1), torch.ones_like(w.sum(-1)), atol=1e-5)  # rows sum to 1
            if keys_pad is not None:  # padded source positions get no attention
                assert (w.masked_select(keys_pad[:, None, None, :].expand_as(w)) == 0).all()
            else:  # causal: no attention to later positions
                assert (w.triu(diagonal=1) == 0).all()
    assert all(m.recorder is None for m in model.modules() if hasattr(m, "recorder"))


def test_trace_chooses_what_generate_outputs(tmp_path):
    from seqlab.data.tokenizer import Tokenizer, TokenizerConfig
    from seqlab.inference.inspection import attention_maps, inspect_page, trace
    from seqlab.model import ModelConfig, Seq2SeqTransformer

    lines = [f"the {w} sat on the {v} mat" for w in ("cat", "dog", "bird", "cow") for v in ("red", "blue", "big")]
    tokenizer = Tokenizer.train(lines * 20, lines * 20, TokenizerConfig(vocab_size=300))
    torch.manual_seed(0)
    model = Seq2SeqTransformer(ModelConfig(src_vocab_size=tokenizer.src_vocab_size, d_model=32, n_heads=4,
                                           encoder_layers=2, decoder_layers=2, d_ff=64, max_positions=64)).eval()
    cfg = DecodingConfig(max_length=12, no_repeat_ngram_size=2, force_eos=True)
    steps = trace(model, tokenizer, "the cat sat", cfg, k=3)
    src = torch.tensor([tokenizer.encode_source(["the cat sat"])[0]])
    out = generate(model, src, torch.zeros_like(src, dtype=torch.bool), cfg)
    assert [s.chosen_id for s in steps] == out.sequences[0, 0, : out.lengths[0, 0]].tolist()
    assert all(len(s.before) == 3 and s.after[0][0] == s.chosen for s in steps)
    maps = attention_maps(model, tokenizer, "the cat sat", cfg=cfg)
    assert maps.alignment().shape == (len(maps.tgt_pieces), len(maps.src_pieces))
    page = inspect_page(maps, steps, "test")
    assert page.count("<img") == 1 + 3 * 2 and "step by step" in page


def test_beam_trace_shows_the_search_that_generate_runs():
    from seqlab.data.tokenizer import Tokenizer, TokenizerConfig
    from seqlab.inference.inspection import beam_trace
    from seqlab.model import ModelConfig, Seq2SeqTransformer
    from seqlab.tracking.figures import beam_tree_png

    lines = [f"the {w} sat on the {v} mat" for w in ("cat", "dog", "bird", "cow") for v in ("red", "blue", "big")]
    tokenizer = Tokenizer.train(lines * 20, lines * 20, TokenizerConfig(vocab_size=300))
    torch.manual_seed(1)
    model = Seq2SeqTransformer(ModelConfig(src_vocab_size=tokenizer.src_vocab_size, d_model=32, n_heads=4,
                                           encoder_layers=1, decoder_layers=1, d_ff=64, max_positions=64)).eval()
    with torch.no_grad():
        model.output.weight.mul_(8)  # sharper distributions: EOS wins somewhere, beams finish early
    cfg = DecodingConfig(method="beam", num_beams=3, max_length=6, force_eos=True)
    nodes = beam_trace(model, tokenizer, "the cat sat", cfg)
    steps = sorted({n.step for n in nodes})
    assert all(sum(n.fate == "kept" for n in nodes if n.step == t) <= 3 for t in steps)
    assert all(len([n for n in nodes if n.step == t]) == 6 for t in steps)  # 2K candidates per step
    src = torch.tensor([tokenizer.encode_source(["the cat sat"])[0]])
    out = generate(model, src, torch.zeros_like(src, dtype=torch.bool), cfg)
    best_len = int(out.lengths[0, 0])
    finished = [n for n in nodes if n.fate == "finished" and n.step == best_len]
    assert any(abs(n.score / best_len ** cfg.length_penalty - float(out.scores[0, 0])) < 1e-4 for n in finished)
    assert len(beam_tree_png(nodes)) > 1000


def test_relative_schemes_record_their_weights_and_show_their_bias():
    """Recorded weights include the position bias (they are what the layers used: the outputs equal the plain
    forward's, rows sum to 1, padding and later keys get none); the page draws ALiBi's and T5's bias per stack."""
    from seqlab.inference.inspection import AttentionMaps, inspect_page, position_bias
    from seqlab.model import ModelConfig, Seq2SeqTransformer

    g = torch.Generator().manual_seed(3)
    src, pad, tgt = toy_batch(g, 3, 40)
    for scheme in ("rope", "alibi", "t5"):
        torch.manual_seed(0)
        model = Seq2SeqTransformer(ModelConfig(src_vocab_size=40, d_model=16, n_heads=4, encoder_layers=2,
                                               decoder_layers=2, d_ff=32, dropout=0.0, positions=scheme)).eval()
        with torch.no_grad(), record_attention(model) as found:
            model(src, pad, tgt)
        for w in found["encoder"]:
            assert torch.allclose(w.sum(-1), torch.ones_like(w.sum(-1)), atol=1e-5)
            assert (w.masked_select(pad[:, None, None, :].expand_as(w)) == 0).all()
        assert all((w.triu(diagonal=1) == 0).all() for w in found["decoder_self"])
        bias = position_bias(model, 5, 4)
        if scheme == "rope":
            assert bias is None
            continue
        assert bias["encoder"].shape == (4, 5, 5) and torch.isinf(bias["decoder_self"][:, 0, 1]).all()
        maps = AttentionMaps([f"s{i}" for i in range(5)], [f"t{i}" for i in range(4)],
                             {"encoder": [], "decoder_self": [], "cross": [torch.rand(4, 4, 5)]}, scheme, bias)
        page = inspect_page(maps, [], "a model")
        assert f"positions: {scheme}" in page and "encoder position bias" in page
        assert "decoder self position bias" in page


def test_the_logged_alignments_are_over_the_recorded_hypotheses(tmp_path):
    """What W&B shows beside a prediction is the attention over that prediction (teacher-forced), not over a
    greedy decoding of its own; the model stays where it is."""
    from seqlab.data.tokenizer import Tokenizer, TokenizerConfig
    from seqlab.inference.inspection import alignment_images, attention_maps
    from seqlab.model import ModelConfig, Seq2SeqTransformer

    lines = [f"the {w} sat on the {v} mat" for w in ("cat", "dog", "bird", "cow") for v in ("red", "blue", "big")]
    tokenizer = Tokenizer.train(lines * 20, lines * 20, TokenizerConfig(vocab_size=300))
    torch.manual_seed(0)
    model = Seq2SeqTransformer(ModelConfig(src_vocab_size=tokenizer.src_vocab_size, d_model=32, n_heads=4,
                                           encoder_layers=1, decoder_layers=1, d_ff=64, max_positions=64)).eval()
    hypotheses = ["the dog sat on the big mat", "a cow"]
    paths = alignment_images(model, tokenizer, ["the cat sat", "the bird"], hypotheses, tmp_path)
    assert [p.name for p in paths] == ["attention-0.png", "attention-1.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in paths)
    maps = attention_maps(model, tokenizer, "the cat sat", hypotheses[0])
    ids = tokenizer.encode_target([hypotheses[0]])[0]
    assert maps.tgt_pieces[1:] == [tokenizer.id_to_piece(i, "tgt") for i in ids[:-1]]  # after the start token
    assert next(model.parameters()).device.type == "cpu"
