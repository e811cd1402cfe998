"""Export to CTranslate2: every expressible variant gives CTranslate2's engine seqlab's numbers.

Checked on random models of each variant: teacher-forced token log-probs from CTranslate2's
`score_batch` equal seqlab's `score` (the weights, norms, positions, scaling and tying all went
across), and greedy outputs are equal token for token.
"""

from __future__ import annotations

import pytest
import torch

from seqlab.constants import EOS_ID, PAD_ID
from seqlab.data.sequences import pad_right
from seqlab.decoding import DecodingConfig, generate, score
from seqlab.interop.ct2 import export_ctranslate2
from seqlab.interop.hf import InteropError
from seqlab.model import ModelConfig, Seq2SeqTransformer

ctranslate2 = pytest.importorskip("ctranslate2")
VOCAB = 60
TOKENS = ["<pad>", "<unk>", "<s>", "</s>", *(f"t{i}" for i in range(4, VOCAB))]
VARIANTS = [
    {}, {"norm_position": "pre"}, {"norm_position": "pre", "final_norm": False}, {"positions": "learned"},
    {"tie_embeddings": "none"}, {"tie_embeddings": "decoder"}, {"scale_embedding": False}, {"activation": "gelu"},
    {"activation": "silu"}, {"layernorm_embedding": True}, {"output_bias": True},
    {"positions": "rope"}, {"positions": "rope", "norm_position": "pre", "rope_dim": 4, "rope_base": 500.0},
    {"positions": "t5"}, {"positions": "t5", "norm_position": "pre", "t5_buckets": 8, "t5_max_distance": 12},
    {"positions": "none"},
]


class Pieces:
    """A tokenizer stand-in (what interop.ct2 reads of data.protocol.TextTokenizer): piece i is TOKENS[i] (ids
    0-3 are the specials whatever their pieces), seqlab's own layout."""

    layout, unk_id, src_vocab_size, tgt_vocab_size = None, 1, VOCAB, VOCAB

    def id_to_piece(self, i: int, side: str = "tgt") -> str:
        return f"t{i}"


def random_model(**variant) -> Seq2SeqTransformer:
    torch.manual_seed(0)
    cfg = ModelConfig(src_vocab_size=VOCAB, d_model=32, n_heads=4, encoder_layers=2, decoder_layers=2, d_ff=64,
                      dropout=0.0, max_positions=64, **variant)
    model = Seq2SeqTransformer(cfg).eval()
    with torch.no_grad():
        model.output.weight.mul_(3.0)  # peaked distributions, as a trained model's: few near-ties
    return model


def sources(n: int = 32) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(4, VOCAB, (int(torch.randint(2, 14, (1,), generator=g)),), generator=g).tolist() + [EOS_ID]
            for _ in range(n)]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(f"{k}={x}" for k, x in v.items()) or "default")
def test_exported_model_scores_and_decodes_like_seqlab(tmp_path, variant):
    model = random_model(**variant)
    translator = ctranslate2.Translator(str(export_ctranslate2(model, Pieces(), tmp_path / "ct2")), device="cpu",
                                        intra_threads=1)
    srcs = sources()
    tokens = [[TOKENS[i] for i in s] for s in srcs]
    limit = 12
    greedy = translator.translate_batch(tokens, beam_size=1, max_decoding_length=limit,
                                        suppress_sequences=[["<pad>"], ["<s>"]])
    same = 0
    for src, src_tokens, out in zip(srcs, tokens, greedy, strict=True):
        ids, pad = torch.tensor([src]), torch.zeros(1, len(src), dtype=torch.bool)
        ours = generate(model, ids, pad, DecodingConfig(max_length=limit))
        seq = ours.sequences[0, 0, : ours.lengths[0, 0]].tolist()
        theirs = [TOKENS.index(t) for t in out.hypotheses[0]]
        same += (seq[:-1] if seq[-1] == EOS_ID else seq) == theirs  # CTranslate2 returns no EOS
        target = [*theirs, EOS_ID]
        ct2_lp = translator.score_batch([src_tokens], [out.hypotheses[0]])[0].log_probs  # EOS scored too
        ours_lp = score(model, ids, pad, torch.tensor([target]))[0]
        assert torch.allclose(ours_lp, torch.tensor(ct2_lp), atol=1e-4), (variant, ours_lp, ct2_lp)
    assert same >= len(srcs) - 1, f"greedy outputs equal on {same}/{len(srcs)}"


def test_what_ctranslate2_cannot_express_is_refused_before_writing(tmp_path):
    out = tmp_path / "ct2"
    with pytest.raises(InteropError, match="model.copy_attention=true"):
        export_ctranslate2(random_model(copy_attention=True), Pieces(), out)
    with pytest.raises(InteropError, match="model.final_norm=true with model.norm_position=post"):
        export_ctranslate2(random_model(final_norm=True), Pieces(), out)
    with pytest.raises(InteropError, match="model.positions=alibi: CTranslate2 has ALiBi in decoders only"):
        export_ctranslate2(random_model(positions="alibi"), Pieces(), out)
    with pytest.raises(InteropError, match="quantization='int3'"):
        export_ctranslate2(random_model(), Pieces(), out, quantization="int3")
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_int8_export_loads_and_translates(tmp_path):
    path = export_ctranslate2(random_model(), Pieces(), tmp_path / "int8", quantization="int8")
    translator = ctranslate2.Translator(str(path), device="cpu", compute_type="int8", intra_threads=1)
    out = translator.translate_batch([[TOKENS[i] for i in s] for s in sources(4)], beam_size=2, max_decoding_length=8)
    assert all(1 <= len(o.hypotheses[0]) <= 8 for o in out)


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_banned_words_and_suppressed_tokens_go_across_as_suppress_sequences(tmp_path, method):
    """bad_words_ids and suppress_tokens run in CTranslate2 as its suppress_sequences, with HF's semantics:
    the outputs equal seqlab's search with the same bans, which change them."""
    from seqlab.engines.ct2 import CT2Engine

    model = random_model()
    engine = CT2Engine(export_ctranslate2(model, None, tmp_path / "ct2"), model, None, threads=1)
    srcs = sources(16)
    ids, pad = pad_right(srcs, PAD_ID)
    # CTranslate2 bans before its softmax: in beam search, seqlab's renormalized search (decoding.options)
    beams = dict(method="beam", num_beams=3, renormalize_logits=True) if method == "beam" else {}
    plain = generate(model, ids, pad, DecodingConfig(max_length=10, **beams))
    firsts = plain.sequences[:, 0, 0].tolist()
    common = max(set(firsts), key=firsts.count)  # the most frequent first token, banned outright
    second = plain.sequences[0, 0, :2].tolist()  # a bigram some output has, banned as a sequence
    cfg = DecodingConfig(max_length=10, bad_words_ids=[[common], second], suppress_tokens=[5], **beams)
    ours, theirs = generate(model, ids, pad, cfg), engine.generate(model, ids, pad, cfg)
    same = sum(ours.sequences[i, 0, : ours.lengths[i, 0]].tolist() == theirs.sequences[i, 0, : theirs.lengths[i, 0]]
               .tolist() for i in range(len(srcs)))
    assert same == len(srcs), f"{same}/{len(srcs)} equal"
    assert all(ours.sequences[i, 0, 0] != common for i in range(len(srcs)))
    assert not torch.equal(ours.sequences[:, 0, :3], plain.sequences[:, 0, :3])


EXACT = [  # settings the CTranslate2 engine takes (decoding.options): its beam search is seqlab's, token for token
    dict(length_penalty=1.0), dict(length_penalty=0.6), dict(length_penalty=2.0), dict(n_best=3),
    dict(max_length=None),  # fairseq's per-source limits: one CTranslate2 call per limit
    dict(renormalize_logits=True, suppress_special=True),  # the pad/start ban, renormalized as CTranslate2 does
    dict(renormalize_logits=True, min_length=5, suppress_tokens=[5], bad_words_ids=[[6, 7]]),
    dict(renormalize_logits=True, suppress_special=True, no_repeat_ngram_size=2),  # the start token banned
    dict(renormalize_logits=True, suppress_tokens=[2], no_repeat_ngram_size=1),
]


@pytest.mark.parametrize("setting", EXACT, ids=[repr(s) for s in EXACT])
def test_beam_search_on_ctranslate2_equals_seqlabs_where_it_is_taken(tmp_path, setting):
    """On a model whose hypotheses mostly end before the limit (EOS made likely), so that length
    normalization and the stopping rule decide the outputs."""
    from seqlab.engines.ct2 import CT2Engine

    model = random_model(output_bias=True)
    with torch.no_grad():
        model.output.bias[EOS_ID] = 8.0
    engine = CT2Engine(export_ctranslate2(model, None, tmp_path / "ct2"), model, None, threads=1)
    ids, pad = pad_right(sources(32), PAD_ID)
    cfg = DecodingConfig(**{"method": "beam", "num_beams": 4, "max_length": 12, "suppress_special": False,
                            **setting})
    ours, theirs = generate(model, ids, pad, cfg), engine.generate(model, ids, pad, cfg)
    assert (ours.lengths[:, 0] < (ours.lengths[:, 0].max())).any(), "some hypotheses end early"
    for i in range(ids.shape[0]):
        for k in range(cfg.n_best):
            assert ours.sequences[i, k, : ours.lengths[i, k]].tolist() == \
                theirs.sequences[i, k, : theirs.lengths[i, k]].tolist(), (i, k)


def test_no_repeat_ngrams_need_the_start_token_banned():
    """CTranslate2 leaves the decoder start out of its n-grams: refused where the start may be emitted."""
    from seqlab.config import ConfigError
    from seqlab.engines.ct2 import check_decodable

    with pytest.raises(ConfigError, match="decoding.no_repeat_ngram_size=2 counts"):
        check_decodable(DecodingConfig(no_repeat_ngram_size=2, suppress_special=False))
    check_decodable(DecodingConfig(no_repeat_ngram_size=2))  # seqlab's rule bans the start token
    bart = ModelConfig(src_vocab_size=VOCAB, bos_id=EOS_ID)  # BART starts from EOS, which ends a hypothesis
    check_decodable(DecodingConfig(no_repeat_ngram_size=2, suppress_special=False), bart)


def test_an_engine_in_its_own_process_decodes_as_in_this_one_and_names_its_errors(tmp_path):
    """engines.own_process: the same hypotheses through the pipe as from the Translator here, the pipe's seconds
    counted apart, an error in the other process raised here with its message, the process ended when collected, and
    its death by SIGKILL (the kernel's answer to a lack of memory) named as such."""
    import gc

    from seqlab.engines.ct2 import CT2Engine

    model = random_model()
    path = export_ctranslate2(model, Pieces(), tmp_path / "fp32")
    here, apart = CT2Engine(path, model, Pieces(), threads=1), CT2Engine(path, model, Pieces(), threads=1,
                                                                         own_process=True)
    for cfg in (DecodingConfig(max_length=10), DecodingConfig(method="beam", num_beams=3, max_length=10,
                                                              renormalize_logits=True)):
        assert apart.translate_ids(sources(8), cfg, 10) == here.translate_ids(sources(8), cfg, 10)
    assert apart.engine.overhead > 0.0
    with pytest.raises(RuntimeError, match="CTranslate2, in its own process: ValueError: The beam size must be > 0"):
        apart.engine.translate_batch([["t4", "</s>"]], beam_size=0)
    process = apart.engine.process
    del apart
    gc.collect()
    assert process.wait(timeout=10) == 0
    killed = CT2Engine(path, model, Pieces(), threads=1, own_process=True)
    killed.engine.process.kill()  # as the kernel kills a process for want of memory
    killed.engine.process.wait()  # gone before the call: its pipe breaks as the call is written
    with pytest.raises(RuntimeError, match=r"ended \(exit -9\): killed by the system \(SIGKILL\), most often for want "
                                           "of memory"):
        killed.translate_ids(sources(2), DecodingConfig(max_length=10), 10)
