"""Hugging Face Marian interop: logits, greedy and beam outputs identical to transformers' generate."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from seqlab.decoding import DecodingConfig, generate, score  # noqa: E402
from seqlab.interop import from_hf, to_hf  # noqa: E402
from seqlab.interop.generation import decoding_of  # noqa: E402
from tests.toy_marian import EOS, PAD, VOCAB, batch, hf_generate, marian  # noqa: E402

TRAIN_STEPS = 80


@pytest.fixture(scope="module")
def trained() -> transformers.MarianMTModel:
    return marian(3, train_steps=TRAIN_STEPS)


@pytest.mark.parametrize("shared", [True, False])
def test_logits_match_and_round_trip(shared):
    hf = marian(1, share_encoder_decoder_embeddings=shared, **({} if shared else {"decoder_vocab_size": VOCAB}))
    ours = from_hf(hf)
    ids, pad = batch()
    tgt = torch.randint(1, PAD, (4, 7))
    tgt_in = torch.cat([torch.full((4, 1), PAD), tgt[:, :-1]], 1)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=(~pad).long(), decoder_input_ids=tgt_in).logits
        got = ours(ids, pad, tgt_in)
        back = to_hf(ours)(input_ids=ids, attention_mask=(~pad).long(), decoder_input_ids=tgt_in).logits
    assert (got - ref).abs().max() <= 1e-4
    assert (back - ref).abs().max() <= 1e-4


def test_greedy_identical_to_hf(trained):
    hf = trained
    ours = from_hf(hf)
    ids, pad = batch(1)
    ref = hf_generate(hf, ids, pad, num_beams=1, max_new_tokens=12, output_logits=True)
    out = generate(ours, ids, pad, DecodingConfig(method="greedy", max_length=12))
    for i in range(ids.shape[0]):
        expected = ref.sequences[i, 1:].tolist()
        got = out.sequences[i, 0, : out.lengths[i, 0]].tolist()
        assert got == expected[: len(got)] and all(t == PAD for t in expected[len(got):])
    # Per-token log-probs are the model's own distribution: HF's raw logits, log-softmaxed.
    raw = torch.stack(ref.logits, 1).log_softmax(-1)  # (B, T, V)
    trans = raw.gather(2, ref.sequences[:, 1:, None]).squeeze(2)
    for i in range(ids.shape[0]):
        n = int(out.lengths[i, 0])
        assert torch.allclose(out.token_logprobs[i, 0, :n], trans[i, :n], atol=1e-4)


@pytest.mark.parametrize("num_beams", [4, 5])
@pytest.mark.parametrize("length_penalty", [0.6, 1.0])
def test_beam_identical_to_hf(trained, num_beams, length_penalty):
    hf = trained
    ours = from_hf(hf)
    ids, pad = batch(2)
    n_best = 2
    assert len(set(generate(from_hf(hf), ids, pad, DecodingConfig(max_length=15)).lengths.view(-1).tolist())) > 1
    ref = hf_generate(hf, ids, pad, num_beams=num_beams, length_penalty=length_penalty, early_stopping=True,
                      max_new_tokens=15, num_return_sequences=n_best)
    cfg = DecodingConfig(method="beam", num_beams=num_beams, n_best=n_best, length_penalty=length_penalty,
                         early_stopping=True, max_length=15)
    out = generate(ours, ids, pad, cfg)
    ref_seqs = ref.sequences.view(ids.shape[0], n_best, -1)
    ref_scores = ref.sequences_scores.view(ids.shape[0], n_best)
    for i in range(ids.shape[0]):
        for j in range(n_best):
            n = int(out.lengths[i, j])
            expected = ref_seqs[i, j, 1:].tolist()
            assert out.sequences[i, j, :n].tolist() == expected[:n]
            assert all(t == PAD for t in expected[n:])
    assert (out.scores - ref_scores).abs().max() <= 1e-4
    # Token log-probs equal HF's transition scores (beam scores are log-softmax before any masking).
    trans = hf.compute_transition_scores(ref.sequences, ref.scores, ref.beam_indices, normalize_logits=False)
    trans = trans.view(ids.shape[0], n_best, -1)
    for i in range(ids.shape[0]):
        for j in range(n_best):
            n = int(out.lengths[i, j])
            assert torch.allclose(out.token_logprobs[i, j, :n], trans[i, j, :n], atol=1e-4)
    # Beam scores are the summed token log-probs over length ** alpha.
    recomputed = out.token_logprobs.sum(-1) / out.lengths.float() ** length_penalty
    assert (recomputed - out.scores).abs().max() <= 1e-4


def test_beam_with_penalties_and_bans_identical_to_hf(trained):
    """Beam search applies its trailing bans (no-repeat n-grams, suppressed ids, min length, forced EOS)
    in place after adding the running scores; HF applies them before. Same hypotheses, same scores."""
    ours = from_hf(trained)
    ids, pad = batch(4)
    kw = dict(num_beams=4, length_penalty=0.8, early_stopping=True, max_new_tokens=9)
    ref = hf_generate(trained, ids, pad, repetition_penalty=1.3, no_repeat_ngram_size=2, min_new_tokens=3,
                      forced_eos_token_id=EOS, num_return_sequences=2, **kw)
    cfg = DecodingConfig(method="beam", num_beams=4, n_best=2, length_penalty=0.8, early_stopping=True,
                         max_length=9, repetition_penalty=1.3, no_repeat_ngram_size=2, min_length=3, force_eos=True)
    out = generate(ours, ids, pad, cfg)
    plain = generate(ours, ids, pad, DecodingConfig(method="beam", num_beams=4, n_best=2, max_length=9))
    assert not torch.equal(out.sequences[:, :, :9], plain.sequences[:, :, :9]), "the processors must bite"
    ref_seqs = ref.sequences.view(ids.shape[0], 2, -1)
    for i in range(ids.shape[0]):
        for j in range(2):
            n = int(out.lengths[i, j])
            expected = ref_seqs[i, j, 1:].tolist()
            assert out.sequences[i, j, :n].tolist() == expected[:n] and all(t == PAD for t in expected[n:])
    assert (out.scores - ref.sequences_scores.view(-1, 2)).abs().max() <= 1e-4


def test_token_logprobs_equal_teacher_forcing(trained):
    ours = from_hf(trained)
    ids, pad = batch(3)
    out = generate(ours, ids, pad, DecodingConfig(method="beam", num_beams=4, max_length=10))
    seqs = out.sequences[:, 0]
    forced = score(ours, ids, pad, seqs)
    within = torch.arange(seqs.shape[1])[None, :] < out.lengths[:, :1]
    assert (forced * within - out.token_logprobs[:, 0]).abs().max() <= 1e-4


def test_variants_marian_cannot_express_are_refused():
    from seqlab.interop.catalog import FAMILIES
    from seqlab.interop.hf import InteropError
    from seqlab.interop.hf_export import hf_config
    from seqlab.model import ModelConfig, Seq2SeqTransformer

    cfg = ModelConfig(src_vocab_size=40, d_model=16, n_heads=4, tie_embeddings="all", copy_attention=True,
                      norm_position="pre")
    refusal = r"model.norm_position='pre' \(marian has 'post'\).*model.copy_attention=True \(marian has False\)"
    with pytest.raises(InteropError, match=refusal):
        hf_config(cfg, FAMILIES["marian"])
    with pytest.raises(InteropError, match=r"no Hugging Face family computes this variant.*copy_attention=True"):
        to_hf(Seq2SeqTransformer(cfg))
    for scheme in ("rope", "alibi", "t5", "none", "learned"):
        relative = ModelConfig(src_vocab_size=40, d_model=16, n_heads=4, positions=scheme)
        with pytest.raises(InteropError, match=f"model.positions='{scheme}' "):
            hf_config(relative, FAMILIES["marian"])


@pytest.mark.parametrize("num_beams", [1, 4])
def test_force_eos_identical_to_hf(trained, num_beams):
    """At the last allowed step only EOS: HF's forced_eos_token_id, for greedy and beam search."""
    ours = from_hf(trained)
    ids, pad = batch(2)
    ref = hf_generate(trained, ids, pad, num_beams=num_beams, early_stopping=True, max_new_tokens=4,
                      forced_eos_token_id=EOS)
    cfg = DecodingConfig(method="beam" if num_beams > 1 else "greedy", num_beams=num_beams, max_length=4,
                         force_eos=True)
    out = generate(ours, ids, pad, cfg)
    plain = generate(ours, ids, pad, DecodingConfig(method=cfg.method, num_beams=num_beams, max_length=4))
    assert (out.sequences[:, 0, :4] != plain.sequences[:, 0, :4]).any(), "the limit must bite for this test"
    for i in range(ids.shape[0]):
        n = int(out.lengths[i, 0])
        assert out.sequences[i, 0, n - 1] == EOS
        expected = ref.sequences[i, 1:].tolist()
        assert out.sequences[i, 0, :n].tolist() == expected[:n] and all(t == PAD for t in expected[n:])
    if num_beams > 1:
        assert (out.scores[:, 0] - ref.sequences_scores).abs().max() <= 1e-4


def test_decoding_config_from_hf_generation_config():
    gc = transformers.GenerationConfig(num_beams=4, max_length=64, min_length=3, length_penalty=0.6,
                                       early_stopping=True, forced_eos_token_id=0, num_return_sequences=2)
    cfg = decoding_of(gc)
    assert (cfg.method, cfg.num_beams, cfg.n_best, cfg.length_penalty, cfg.early_stopping) == ("beam", 4, 2, 0.6,
                                                                                              True)
    assert (cfg.max_length, cfg.min_length, cfg.force_eos) == (63, 2, "hf")  # HF counts the start token
    sample = decoding_of(transformers.GenerationConfig(
        do_sample=True, top_p=0.9, temperature=0.7, epsilon_cutoff=3e-4, max_new_tokens=20))
    assert (sample.method, sample.top_k, sample.top_p, sample.temperature, sample.epsilon, sample.max_length) == (
        "sample", 50, 0.9, 0.7, 3e-4, 20)  # HF's default top_k=50 applies when sampling
    assert decoding_of({"num_beams": 1}).method == "greedy"
