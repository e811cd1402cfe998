"""Speculative decoding (decoding.speculative): greedy outputs and samples equal plain decoding's token for token
on both architectures under every draft and schedule, with the processors that read the prefix; a cache with
holes computes what the kept tokens alone give; prompt lookup proposes what Hugging Face's does; the samples
follow the model's exact distribution (chi-square); and what cannot speculate is refused by name."""

from __future__ import annotations

import importlib
import itertools
from dataclasses import replace

import pytest
import torch

from seqlab.config import ConfigError
from seqlab.data.sequences import pad_right
from seqlab.decoding import DecodingConfig, generate
from seqlab.decoding.speculative import SpeculativeStats, check_draft, lookup
from seqlab.model import DecoderCache, ModelConfig, build_model

VOCAB = 40
ARCHITECTURES = ["encoder_decoder", "decoder_only", "prefix_lm"]


def model_of(architecture: str, seed: int = 0, vocab: int = VOCAB, **variant):
    torch.manual_seed(seed)
    layers = dict(encoder_layers=2, decoder_layers=2) if architecture == "encoder_decoder" else dict(
        encoder_layers=0, decoder_layers=2)
    cfg = ModelConfig(src_vocab_size=vocab, architecture=architecture, d_model=16, n_heads=4, d_ff=32, dropout=0.0,
                      max_positions=64, **layers, **variant)
    model = build_model(cfg).eval()
    with torch.no_grad():
        model.output.weight.mul_(3.0)  # peaked distributions: few near-ties
    return model


def sources(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Five sources of 3 to 13 tokens over a small alphabet (repeats for prompt lookup to find)."""
    g = torch.Generator().manual_seed(seed)
    return pad_right([torch.randint(4, 12, (n,), generator=g).tolist() + [3] for n in (6, 2, 9, 4, 12)], 0)


SETTINGS = [
    DecodingConfig(max_length=20),
    DecodingConfig(max_len_a=1.0, max_len_b=4, repetition_penalty=1.3, no_repeat_ngram_size=3, min_length=5,
                   force_eos="hf"),
    DecodingConfig(method="sample", max_length=20, temperature=0.8, top_k=10, n_best=2, seed=3),
]
DRAFTS = [("lookup", "fixed"), ("lookup", "adaptive"), ("other", "fixed"), ("other", "adaptive"), ("itself", "fixed")]


def decode(model, src, pad, cfg, draft: str, schedule: str, stats=None):
    other = {"other": model_of(model.cfg.architecture, seed=1, positions=model.cfg.positions), "itself": model}
    setting = replace(cfg, draft="lookup" if draft == "lookup" else "ckpt:draft.ckpt", draft_tokens=3,
                      draft_schedule=schedule, draft_positions="all")  # proposing at every call: the machinery
    return generate(model, src, pad, setting, draft_model=other.get(draft), stats=stats)


@pytest.mark.parametrize(("architecture", "positions"), [("encoder_decoder", "sinusoidal"), ("encoder_decoder", "t5"),
                                                       ("decoder_only", "rope"), ("prefix_lm", "learned")])
def test_speculative_outputs_equal_plain_decoding_token_for_token(architecture, positions):
    model = model_of(architecture, positions=positions)
    src, pad = sources()
    calls = tokens = 0
    for cfg, (draft, schedule) in itertools.product(SETTINGS, DRAFTS):
        plain = generate(model, src, pad, cfg)
        stats = SpeculativeStats()
        out = decode(model, src, pad, cfg, draft, schedule, stats)
        calls, tokens = calls + stats.calls, tokens + stats.tokens
        assert torch.equal(out.sequences, plain.sequences), (cfg.label, draft, schedule)
        assert torch.equal(out.lengths, plain.lengths)
        assert torch.allclose(out.token_logprobs, plain.token_logprobs, atol=1e-5)
        assert torch.allclose(out.scores, plain.scores, atol=1e-4)
        assert stats.tokens == int(plain.lengths.sum())
        if draft == "itself" and cfg.method == "greedy":
            assert stats.acceptance == 1.0  # a model drafting for itself is always right
    assert calls < 0.7 * tokens  # proposals were kept: fewer decoder calls than tokens


@pytest.mark.parametrize(("draft", "per_position", "pays"), [("lookup", 0.001, True), ("lookup", 1.0, False),
                                                              ("other", 0.001, True), ("other", 1.0, False)])
def test_a_batch_verifies_the_proposals_that_pay_for_their_positions(monkeypatch, draft, per_position, pays):
    """Pacing reads the batch's own calls (here a call of R positions takes 1 + per_position * R seconds): where a
    position is nearly free the rows go on proposing, where it costs a row's step the batch stops after its
    measuring call (one proposal a row at most); outputs are plain decoding's either way, the draft model's
    cache following the plain steps too."""
    from seqlab.decoding.speculative import Pacing

    generating = importlib.import_module("seqlab.decoding.generate")  # the module (the package exports the function)
    made = []

    class Priced(Pacing):
        def observe(self, rows: int, positions: int, seconds: float) -> None:
            super().observe(rows, positions, (0.0 if per_position == 1.0 else 1.0) + per_position * positions)

    def priced(model, setting: str, rows: int) -> Pacing:
        made.append(Priced())
        return made[-1]

    monkeypatch.setattr(generating, "pacing_for", priced)
    model = model_of("encoder_decoder")
    src, pad = sources()
    cfg = DecodingConfig(max_length=20)
    stats = SpeculativeStats()
    drafted = replace(cfg, draft="lookup" if draft == "lookup" else "ckpt:d", draft_tokens=3)
    out = generate(model, src, pad, drafted, stats=stats,
                   draft_model=model_of("encoder_decoder", seed=1) if draft == "other" else None)
    assert torch.equal(out.sequences, generate(model, src, pad, cfg).sequences)
    (pacing,) = made
    assert pacing.calls[0][1] == pacing.calls[0][0] == src.shape[0]  # the first call is a plain step
    proposing = [(rows, positions) for rows, positions, _ in pacing.calls if positions > rows]
    assert (len(proposing) > 3) is pays
    assert all(positions <= 2 * rows for rows, positions in proposing[:2])  # measuring: A / 2, then A proposals
    assert stats.tokens == int(out.lengths.sum())


def test_a_models_later_batches_start_from_the_costs_its_first_batch_measured():
    """The process keeps a model's measured costs (here a position nearly free): the first batch's first call is
    a plain step and its next ones measure; the second batch proposes from its first call, outputs unchanged."""
    from seqlab.decoding.speculative import PACINGS, Pacing, pacing_for

    class Priced(Pacing):
        KEPT = 1000

        def observe(self, rows: int, positions: int, seconds: float) -> None:
            super().observe(rows, positions, 1.0 + 0.001 * positions)

    model = model_of("encoder_decoder")
    src, pad = sources()
    cfg = DecodingConfig(max_length=12, draft="lookup", draft_tokens=3)
    PACINGS[model] = {(cfg.label, src.shape[0]): Priced()}
    pacing = pacing_for(model, cfg.label, src.shape[0])
    once, twice = SpeculativeStats(), SpeculativeStats()
    first = generate(model, src, pad, cfg, stats=once)
    measured = len(pacing.calls)
    rows, positions, _ = pacing.calls[0]
    assert positions == rows and pacing.fit(src.shape[0]) is not None  # a plain call, then enough to fit
    assert torch.equal(generate(model, src, pad, cfg, stats=twice).sequences, first.sequences)
    assert len(pacing.calls) > measured  # the same costs, added to
    assert twice.proposed > once.proposed and twice.calls < once.calls  # no plain and measuring calls this time
    assert pacing_for(model, "greedy_draft3_d", src.shape[0]) is not pacing
    assert pacing_for(model, cfg.label, 1) is not pacing  # another batch size: its own costs
    assert pacing_for(model_of("encoder_decoder"), cfg.label, src.shape[0]) is not pacing
    kept = Pacing()
    for i in range(Pacing.KEPT + 5):
        kept.observe(4, 4, 1.0 + i)
        kept.observe(4, 6, 2.0 + i)
    plain = [t for a, r, t in kept.calls if r == a]
    assert len(kept.calls) == 2 * Pacing.KEPT and plain[0] == 6.0  # the latest of each kind


@pytest.mark.parametrize("architecture", ["encoder_decoder", "decoder_only"])
def test_a_batch_where_no_proposal_pays_decodes_as_plain_greedy_does(monkeypatch, architecture):
    """Once a model's costs say that no proposal pays (a position costs a row's step), its next batch verifies
    none: it is plain greedy search itself (not the speculative loop; its cache keeps no validity record), so the
    log-probs are plain greedy's to the bit, not only its tokens, and it adds nothing to the measured costs."""
    from seqlab.decoding.speculative import PACINGS, Pacing, pacing_for
    from seqlab.model import DecoderCache

    generating = importlib.import_module("seqlab.decoding.generate")

    class Priced(Pacing):
        def observe(self, rows: int, positions: int, seconds: float) -> None:
            super().observe(rows, positions, 1.0 * positions)

    model = model_of(architecture)
    src, pad = sources()
    cfg = DecodingConfig(max_length=12, draft="lookup", draft_tokens=3)
    PACINGS[model] = {(cfg.label, src.shape[0]): Priced()}
    generate(model, src, pad, cfg)  # measures: no proposal pays
    pacing = PACINGS[model][(cfg.label, src.shape[0])]
    measured = list(pacing.calls)
    assert not pacing.pays(torch.full((src.shape[0],), 12), cfg.draft_tokens)
    admitted = []
    admit = DecoderCache.admit_
    monkeypatch.setattr(DecoderCache, "admit_", lambda cache, valid: admitted.append(valid) or admit(cache, valid))
    monkeypatch.setattr(generating, "speculative_search", lambda *a, **k: pytest.fail("the speculative loop ran"))
    stats = SpeculativeStats()
    out = generate(model, src, pad, cfg, stats=stats)
    plain = generate(model, src, pad, replace(cfg, draft=None))
    assert stats.proposed == 0 and admitted == [] and pacing.calls == measured
    assert stats.calls == stats.tokens == int(out.lengths.sum()) and stats.tokens_per_call == 1.0
    assert torch.equal(out.sequences, plain.sequences) and torch.equal(out.token_logprobs, plain.token_logprobs)
    assert pacing_for(model, cfg.label, 1).pays(torch.full((1,), 12), cfg.draft_tokens)  # another size: unmeasured


def test_pacing_verifies_the_likeliest_proposals_that_save_more_than_they_cost():
    from seqlab.decoding.speculative import Pacing

    k, chance = torch.tensor([5, 5, 5, 2]), torch.tensor([0.9, 0.5, 0.3, 0.9])
    pacing = Pacing()
    assert pacing.counts(k, chance).tolist() == [0, 0, 0, 0]  # the first call: a plain step, timed
    pacing.observe(4, 4, 1.0)
    assert pacing.counts(k, chance).tolist() == [1, 1, 0, 0]  # measuring: A / 2 proposals, then A
    pacing.observe(4, 6, 1.2)
    assert pacing.counts(k, chance).tolist() == [1, 1, 1, 1]
    pacing.observe(4, 8, 1.4)  # a = 0.6, b = 0.1, c = 0: a plain step 1.0 s for 4 tokens, 0.25 s a row
    # a proposal kept with chance p saves 0.25 p s and costs 0.1 s: every one above 0.4 (0.9, 0.9, 0.81, 0.81,
    # 0.73, 0.66, 0.59, 0.5), but the fit answers for 8 + 4 / 2 positions at most (the widest call measured,
    # then a step)
    assert pacing.counts(k, chance).tolist() == [4, 0, 0, 2]
    pacing.observe(4, 10, 1.6)  # the step measured on the line: the range widens to 12 positions
    # the eight: the 0.5 too, which lowers this call's tokens a second ((4 + 5.9) / 1.8 < (4 + 5.4) / 1.7) and
    # still saves the batch 0.125 s for its 0.1
    assert pacing.counts(k, chance).tolist() == [5, 1, 0, 2]
    dear = Pacing(calls=[(4, 4, 1.0), (4, 6, 1.5), (4, 8, 2.0)])  # a = 0: a position costs a row's step
    assert dear.counts(k, chance).tolist() == [0, 0, 0, 0]
    overhead = Pacing(calls=[(4, 4, 1.0), (4, 6, 2.5), (4, 8, 2.6)])  # c = 1.4: a proposing call's fixed cost
    assert overhead.counts(k, chance).tolist() == [0, 0, 0, 0]
    free = Pacing(calls=[(4, 4, 1.0), (4, 6, 1.0), (4, 8, 1.0), (4, 10, 1.0), (4, 12, 1.0), (4, 14, 1.0)])
    assert free.counts(k, chance).tolist() == [5, 3, 2, 2]  # the 12 likeliest of 17: 14 + 4 / 2 positions
    free.observe(4, 16, 1.0)
    free.observe(4, 18, 1.0)
    assert free.counts(k, chance).tolist() == [5, 5, 4, 2]  # the 16 likeliest: 18 + 4 / 2 positions
    free.observe(4, 20, 1.0)
    assert free.counts(k, chance).tolist() == [5, 5, 5, 2]


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_a_cache_with_holes_computes_what_the_kept_tokens_alone_give(architecture):
    """Decoding [a, filler, b, c] with the filler a hole and c rejected, then d, gives the logits of [a, b, d]
    decoded plainly: positions count kept tokens, and no query reads a hole."""
    model = model_of(architecture, positions="rope")
    src, pad = sources()
    n = src.shape[0]
    g = torch.Generator().manual_seed(0)
    a, b, c, d, filler = (torch.randint(4, VOCAB, (n, 1), generator=g) for _ in range(5))
    with torch.no_grad():
        memory = model.encode(src, pad)
        plain = model.start_cache(memory, pad, capacity=8, src_ids=src)
        expected, _ = model.decode(torch.cat([a, b, d], 1), None, None, plain)
        holes = model.start_cache(memory, pad, capacity=8, src_ids=src)
        holes.admit_(torch.tensor([[True, False, True, True]]).expand(n, 4))
        first, _ = model.decode(torch.cat([a, filler, b, c], 1), None, None, holes)
        holes.reject_(torch.tensor([[True, True, True, False]]).expand(n, 4))
        holes.admit_(torch.ones(n, 1, dtype=torch.bool))
        last, _ = model.decode(d, None, None, holes)
    assert torch.allclose(first[:, [0, 2]], expected[:, :2], atol=1e-5)
    assert torch.allclose(last[:, 0], expected[:, 2], atol=1e-5)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_squeezing_a_caches_holes_changes_no_logit(architecture, monkeypatch):
    """Rows keeping different numbers of tokens leave holes at different positions; moving each row's kept
    positions to the front (`DecoderCache._squeeze`) shortens the buffers and the next calls compute the same
    logits as over the holes."""
    model = model_of(architecture, positions="rope")
    src, pad = sources()
    n = src.shape[0]
    g = torch.Generator().manual_seed(3)
    calls = [torch.randint(4, VOCAB, (n, 4), generator=g) for _ in range(3)]
    patterns = torch.tensor([[1, 1, 0, 1], [1, 0, 1, 0], [1, 0, 0, 1]], dtype=torch.bool)
    kept = [patterns[(torch.arange(n) + c) % 3] for c in range(len(calls))]  # each row's own holes
    results, default = {}, DecoderCache.SQUEEZE
    for squeeze in (default, 2.0):  # 2.0: never squeezed
        monkeypatch.setattr(DecoderCache, "SQUEEZE", squeeze)
        with torch.no_grad():
            cache = model.start_cache(model.encode(src, pad), pad, capacity=4, src_ids=src)
            logits = []
            for ids, keep in zip(calls, kept, strict=True):
                cache.admit_(torch.ones(n, 4, dtype=torch.bool))
                out, cache = model.decode(ids, None, None, cache)
                logits.append(torch.where(keep[..., None], out, 0.0))  # the kept positions' logits
                cache.reject_(keep)
        results[squeeze] = (logits, cache.length, cache.valid.clone())
    (squeezed, short, valid), (plain, long, holes) = results[default], results[2.0]
    assert short < long  # the squeeze freed positions
    assert torch.equal(valid.sum(1), holes.sum(1))  # and kept every row's tokens
    for a, b in zip(squeezed, plain, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_prompt_lookup_proposes_what_hugging_faces_proposes():
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    g = torch.Generator().manual_seed(0)
    eos = 3
    for trial in range(200):
        length = int(torch.randint(1, 30, (1,), generator=g))
        sequence = torch.randint(3, 9, (length,), generator=g)
        k, ngram = int(torch.randint(1, 8, (1,), generator=g)), int(torch.randint(1, 4, (1,), generator=g))
        hf = PromptLookupCandidateGenerator(eos_token_id=torch.tensor([eos]), num_output_tokens=k,
                                            max_matching_ngram_size=ngram, max_length=1000)
        candidates, _ = hf.get_candidates(sequence[None])
        expected = candidates[0, length:].tolist()
        history = torch.cat([sequence, torch.zeros(5, dtype=torch.long)])[None]  # room after the history
        proposals, counts = lookup(history, torch.tensor([length]), k, ngram, (eos,))
        assert proposals[0, : int(counts[0])].tolist() == expected, (trial, sequence.tolist(), k, ngram)


def exact_distribution(model, src, pad, length: int, vocab: int) -> dict[tuple[int, ...], float]:
    """The model's probability of each sequence of `length` tokens (no EOS among them: EOS is banned in the
    test's setting by min_length), by teacher-forced scoring of every sequence."""
    tokens = [1, *range(4, vocab)]  # all but pad 0, BOS 2 (suppress_special) and EOS 3 (min_length)
    sequences = torch.tensor(list(itertools.product(tokens, repeat=length)))  # (M, L)
    with torch.no_grad():
        inputs = torch.cat([torch.full((len(sequences), 1), model.cfg.bos_id), sequences[:, :-1]], 1)
        logits = model(src.expand(len(sequences), -1), pad.expand(len(sequences), -1), inputs)
        allowed = logits.clone()
        allowed[..., [0, 2, 3]] = float("-inf")
        logprobs = allowed.log_softmax(-1).gather(2, sequences[:, :, None]).squeeze(2).sum(1)
    return {tuple(s): float(p) for s, p in zip(sequences.tolist(), logprobs.exp(), strict=True)}


@pytest.mark.parametrize("draft", ["lookup", "other"])
def test_speculative_samples_follow_the_models_distribution(draft):
    """Chi-square of 3,000 samples' 3-token sequences (under distinct sampling keys) against the model's exact
    probabilities, p > 0.001; the first token's distribution likewise. Deterministic under the seed."""
    vocab = 8
    model = model_of("encoder_decoder", vocab=vocab)
    other = model_of("encoder_decoder", seed=5, vocab=vocab)
    src, pad = torch.tensor([[5, 6, 7, 5, 6, 3]]), torch.zeros(1, 6, dtype=torch.bool)
    n = 3000
    cfg = DecodingConfig(method="sample", max_length=3, min_length=3, seed=11,
                         draft="lookup" if draft == "lookup" else "ckpt:x", draft_tokens=2)
    out = generate(model, src.expand(n, -1), pad.expand(n, -1), cfg, sample_keys=torch.arange(n),
                   draft_model=other if draft == "other" else None)
    samples = [tuple(row) for row in out.sequences[:, 0, :3].tolist()]
    exact = exact_distribution(model, src, pad, 3, vocab)
    for key_of in (lambda s: s, lambda s: s[:1]):
        expected: dict[tuple, float] = {}
        for s, p in exact.items():
            expected[key_of(s)] = expected.get(key_of(s), 0.0) + p
        counts: dict[tuple, int] = {}
        for s in samples:
            counts[key_of(s)] = counts.get(key_of(s), 0) + 1
        assert set(counts) <= set(expected)
        # pool the rare outcomes (expected count < 5) into one cell, as the test requires
        common = [k for k, p in expected.items() if p * n >= 5]
        observed = [counts.get(k, 0) for k in common] + [n - sum(counts.get(k, 0) for k in common)]
        wanted = [expected[k] * n for k in common] + [n - sum(expected[k] * n for k in common)]
        chi2 = sum((o - e) ** 2 / e for o, e in zip(observed, wanted, strict=True) if e > 0)
        dof = len([e for e in wanted if e > 0]) - 1
        p_value = float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                                torch.tensor(chi2 / 2, dtype=torch.float64)))
        assert p_value > 1e-3, (chi2, dof, p_value)


def test_what_cannot_speculate_is_refused_by_name():
    with pytest.raises(ConfigError, match="decoding.draft speculates for greedy search and sampling"):
        DecodingConfig(method="beam", num_beams=4, draft="lookup")
    with pytest.raises(ConfigError, match="decoding.draft='draft.ckpt' is not a draft"):
        DecodingConfig(draft="draft.ckpt")
    with pytest.raises(ConfigError, match="decoding.draft_tokens=0"):
        DecodingConfig(draft="lookup", draft_tokens=0)
    with pytest.raises(ConfigError, match="decoding.draft_schedule=adaptive without decoding.draft"):
        DecodingConfig(draft_schedule="adaptive")
    model = model_of("encoder_decoder")
    src, pad = sources()
    with pytest.raises(ConfigError, match="pass the draft's model"):
        generate(model, src, pad, DecodingConfig(max_length=5, draft="ckpt:x"))
    with pytest.raises(ConfigError, match="a step trace cannot follow"):
        generate(model, src, pad, DecodingConfig(max_length=5, draft="lookup"), on_step=lambda *a: None)
    with pytest.raises(ConfigError, match="target_vocab_size 50 against 40"):
        check_draft(model_of("decoder_only", vocab=50).cfg, model.cfg, "ckpt:x")


def test_an_imported_causal_lm_speculates_with_the_processors_that_read_its_prompt():
    """GPT-2 continues its prompt's last token (model.start=prompt), and its repetition penalty and no-repeat
    n-grams count the prompt (Hugging Face's rule): the same outputs with prompt lookup and with a draft model."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from seqlab.interop.hf import from_hf

    torch.manual_seed(0)
    model = from_hf(GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                                               bos_token_id=49, eos_token_id=49)).eval())
    assert model.cfg.start == "prompt"
    g = torch.Generator().manual_seed(0)
    src, pad = pad_right([torch.randint(0, 20, (n,), generator=g).tolist() for n in (5, 9, 3, 12)], 49)
    for cfg in (DecodingConfig(max_length=20, suppress_special=False, repetition_penalty=1.5, no_repeat_ngram_size=2),
                DecodingConfig(method="sample", max_length=20, suppress_special=False, top_p=0.9,
                               repetition_penalty=1.3, seed=4)):
        plain = generate(model, src, pad, cfg)
        lookup = generate(model, src, pad, replace(cfg, draft="lookup", draft_tokens=4))
        drafted = generate(model, src, pad, replace(cfg, draft="ckpt:x", draft_tokens=3), draft_model=model)
        assert torch.equal(lookup.sequences, plain.sequences) and torch.equal(drafted.sequences, plain.sequences)
