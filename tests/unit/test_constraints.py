"""Lexically constrained beam search, exact to fairseq's (`--constraints ordered|unordered`).

Two parts, as fairseq checks its own: the constraint states on fairseq's tests/test_constraints.py cases
(expected values copied from there), and the search against `fairseq_generate` below, fairseq's
SequenceGenerator loop with LexicallyConstrainedBeamSearch written out step by step for one source on a
cache-free model (tensor for tensor where the order of candidates depends on it: the fp32 sort key, the
roll-based deduplication, the stripes). Ties in fairseq's unstable sorts are broken by candidate order on
both sides.
"""

from __future__ import annotations

import math

import pytest
import torch

from seqlab.config import ConfigError
from seqlab.constants import BOS_ID, EOS_ID, PAD_ID
from seqlab.decoding import DecodingConfig, generate
from seqlab.decoding.constraints import Node, OrderedState, UnorderedState, start_state
from seqlab.model import Seq2SeqTransformer
from tests.helpers import trained_toy_model
from tests.unit.test_decoding import sources

# fairseq tests/test_constraints.py: TestUnorderedConstraintState.setUp
SIX = [[1, 2, 3], [1, 3], [1, 4], [4, 5, 6, 7], [1], [4, 5]]
TOKEN_COUNTS = [
    (SIX, {1: 4, 2: 1, 3: 2, 4: 3, 5: 2, 6: 1, 7: 1}),
    ([], {}),
    ([[0]], {0: 1}),
    ([[100000, 1, 2, 3, 4, 5]], {100000: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1}),
    ([[1, 2], [1, 2]], {1: 2, 2: 2}),
    ([[1, 2], [3, 4]], {1: 1, 2: 1, 3: 1, 4: 1}),
]
UNORDERED = [  # (constraints, tokens, bank, num_completed, finished, is_root)
    (SIX, [], 0, 0, False, True),
    (SIX, [1, 2], 2, 0, False, False),
    (SIX, [1, 2, 94], 1, 1, False, True),
    (SIX, [1, 3, 999, 1, 4], 4, 2, False, False),
    (SIX, [1, 3, 999, 1, 4, 999], 4, 2, False, True),
    (SIX, [4, 5, 6, 8], 2, 1, False, True),
    (SIX, [1, 2, 3, 1, 3, 1, 4, 4, 5, 6, 7, 1, 4, 5], 14, 6, True, False),
    (SIX, [1, 2, 3, 999, 1, 3, 1, 4, 4, 5, 6, 7, 1, 4, 5, 117], 14, 6, True, True),
    ([[1], [2, 3]], [1, 1], 1, 1, False, True),
    ([[1, 2], [1, 2]], [1, 2, 1, 2], 4, 2, True, False),
    ([[1, 2], [1, 2]], [1, 2, 1, 2, 1], 4, 2, True, True),
    ([[1, 2], [3, 4]], [1, 2, 3, 4, 5], 4, 2, True, True),
]
ORDERED = [  # fairseq's TestOrderedConstraintState.setUp
    (SIX, [], 0, 0, False, True),
    (SIX, [1, 2], 2, 0, False, False),
    (SIX, [1, 2, 94], 0, 0, False, True),
    (SIX, [1, 3, 999, 1, 4], 0, 0, False, True),
    (SIX, [1, 2, 3, 999, 999], 3, 1, False, False),
    (SIX, [1, 2, 3, 77, 1, 3, 1], 6, 2, False, False),
    (SIX, [1, 2, 3, 1, 3, 1, 4, 4, 5, 6, 7, 1, 4, 5], 14, 6, True, False),
    (SIX, [1, 2, 999, 1, 2, 3, 999, 1, 3, 1, 4, 4, 5, 6, 7, 1, 4, 5, 117], 14, 6, True, False),
    ([[1], [2, 3]], [1, 1], 1, 1, False, False),
    ([[1, 2], [1, 2]], [1, 2, 1, 2], 4, 2, True, False),
    ([[1, 2], [1, 2]], [1, 2, 1, 2, 1], 4, 2, True, False),
    ([[1, 2], [3, 4]], [1, 2, 3, 4, 5], 4, 2, True, False),
]


@pytest.mark.parametrize("constraints, counts", TOKEN_COUNTS)
def test_the_trie_counts_each_tokens_constraints_as_fairseq(constraints, counts):
    assert dict(Node.trie(constraints).token_counts()) == counts


@pytest.mark.parametrize("order, case", [("unordered", c) for c in UNORDERED] + [("ordered", c) for c in ORDERED])
def test_states_follow_fairseqs_cases(order, case):
    constraints, tokens, bank, completed, finished, is_root = case
    state = start_state(constraints, order)
    for token in tokens:
        state = state.advance(token)
    assert (state.bank, state.num_completed, state.finished, state.is_root) == (bank, completed, finished, is_root)


@pytest.mark.parametrize("constraints", [c for c, _ in TOKEN_COUNTS])
def test_unordered_next_tokens_are_the_roots_and_the_current_nodes_children(constraints):
    """fairseq's test_next_tokens: along each constraint, the root's children and the node's children."""
    root_tokens = {c[0] for c in constraints}
    for sequence in constraints:
        state = UnorderedState.start(constraints)
        for token in sequence:
            assert state.next_tokens() == root_tokens | set(state.node.children)
            state = state.advance(token)


def test_ordered_next_tokens_are_the_next_constraint_token_and_past_the_first_the_first():
    state = OrderedState.start([[1, 2], [3]])
    seen = [sorted(state.next_tokens())]
    for token in (1, 2, 9, 3):
        state = state.advance(token)
        seen.append(sorted(state.next_tokens()))
    assert seen == [[1], [2], [1, 3], [1, 3], [1]]  # state 0 does not offer the first token again (fairseq's rule)


# ---- the search: fairseq's SequenceGenerator + LexicallyConstrainedBeamSearch, one source, written out ----


def step_sentence(step, lprobs, states, beams_buf, indices_buf, scores_buf, vocab):
    """fairseq's LexicallyConstrainedBeamSearch.step_sentence (STEP 2-8), its tensors and sort keys."""
    for beamno, state in enumerate(states):
        next_tokens = torch.tensor(sorted(state.next_tokens())).long()
        if next_tokens.numel() != 0:
            indices_buf = torch.cat((indices_buf, next_tokens))
            beams_buf = torch.cat((beams_buf, torch.tensor(beamno).repeat(next_tokens.size(0)).long()))
            scores_buf = torch.cat((scores_buf, lprobs[beamno].take(next_tokens.view(-1))))
        if step == 0:
            break
    cands = [states[beams_buf[i]].advance(indices_buf[i]) for i in range(indices_buf.size(0))]
    banks = torch.tensor([s.bank for s in cands])
    num_constraint_tokens = len(states[0].tokens)
    sort_key = (num_constraint_tokens - banks) * -100 + scores_buf  # fp32, as fairseq's
    _, sort_indices = sort_key.sort(dim=0, descending=True, stable=True)
    scores_buf, indices_buf = scores_buf[sort_indices], indices_buf[sort_indices]
    beams_buf, banks = beams_buf[sort_indices], banks[sort_indices]
    cands = [cands[i] for i in sort_indices]
    uniques = beams_buf * (vocab + 1) + indices_buf
    uniques_mask = torch.cat((uniques[-1:], uniques[:-1])) != uniques  # roll by one
    scores_buf, indices_buf = scores_buf[uniques_mask], indices_buf[uniques_mask]
    beams_buf, banks = beams_buf[uniques_mask], banks[uniques_mask]
    cands = [c for c, keep in zip(cands, uniques_mask.tolist(), strict=True) if keep]
    stripe_offsets = [offset * (len(banks) + 1) for offset in range(len(banks) + 1)]
    stripes = torch.zeros_like(banks)
    cur_bank_count, cur_bank = -1, banks[0]
    for i, bank in enumerate(banks):
        if bank != cur_bank:
            cur_bank_count, cur_bank = 0, bank
        else:
            cur_bank_count += 1
        stripes[i] = num_constraint_tokens - bank + stripe_offsets[cur_bank_count]
    _, sort_indices = stripes.sort(dim=0, stable=True)
    return (scores_buf[sort_indices], indices_buf[sort_indices], beams_buf[sort_indices],
            [cands[i] for i in sort_indices])


def fairseq_generate(model, src, src_pad, constraints, order, beam, max_new, alpha=1.0):
    """One source's finalized hypotheses [(tokens with EOS, score, raw token log-probs)], best first.
    fairseq's max_len counts tokens before EOS: max_new - 1. Pad and the decoder start token are never
    chosen (seqlab's suppress_special; fairseq bans pad)."""
    max_len, num_cands = max_new - 1, 2 * beam
    tokens = [[BOS_ID] for _ in range(beam)]
    token_lps = [[] for _ in range(beam)]
    cum = torch.zeros(beam)
    states = [start_state(constraints, order)] * beam
    finalized = []
    for step in range(max_len + 1):
        with torch.no_grad():
            logits = model(src.expand(beam, -1), src_pad.expand(beam, -1), torch.tensor(tokens))[:, -1].float()
        raw = torch.log_softmax(logits, dim=-1)
        lprobs = raw.clone()
        lprobs[:, [PAD_ID, BOS_ID]] = -math.inf
        if step >= max_len:
            lprobs[:, :EOS_ID] = -math.inf
            lprobs[:, EOS_ID + 1 :] = -math.inf
        vocab = lprobs.shape[1]
        if step > 0:  # STEP 0
            unfinished = [i for i, s in enumerate(states) if not s.finished]
            lprobs[unfinished, EOS_ID] = -math.inf
        lp = lprobs[:1] if step == 0 else lprobs + cum[:, None]
        scores_buf, indices_buf = torch.topk(lp.view(-1), num_cands)
        beams_buf, indices_buf = indices_buf // vocab, indices_buf.fmod(vocab)
        if step > 0:  # STEP 1
            top_scores, top_indices = torch.topk(lp, k=1, dim=1)
            scores_buf = torch.cat((scores_buf, top_scores.view(-1)))
            indices_buf = torch.cat((indices_buf, top_indices.view(-1)))
            beams_buf = torch.cat((beams_buf, torch.arange(beam)))
        scores_buf, indices_buf, beams_buf, cands = step_sentence(step, lp, states, beams_buf, indices_buf,
                                                                  scores_buf, vocab)
        scores_buf, indices_buf, beams_buf = scores_buf[:num_cands], indices_buf[:num_cands], beams_buf[:num_cands]
        eos_mask = indices_buf.eq(EOS_ID) & scores_buf.ne(-math.inf)
        for i in range(beam):  # finalize_hypos, in candidate order, up to beam hypotheses
            if eos_mask[i] and len(finalized) < beam:
                b = int(beams_buf[i])
                score = float(scores_buf[i] / (step + 1) ** alpha)
                finalized.append((tokens[b][1:] + [EOS_ID], score, token_lps[b] + [float(raw[b, EOS_ID])]))
        if len(finalized) == beam or (step == max_len and eos_mask[:beam].any()):
            break
        assert step < max_len, "the constraints cannot be met within the limit (fairseq asserts here)"
        active_mask = eos_mask.long() * num_cands + torch.arange(num_cands)
        _, active = torch.topk(active_mask, k=beam, largest=False)
        parents = beams_buf[active].tolist()
        chosen = indices_buf[active].tolist()
        tokens = [tokens[p] + [c] for p, c in zip(parents, chosen, strict=True)]
        token_lps = [token_lps[p] + [float(raw[p, c])] for p, c in zip(parents, chosen, strict=True)]
        cum = scores_buf[active].clone()
        states = [cands[i] for i in active.tolist()]
    order_ = sorted(range(len(finalized)), key=lambda i: -finalized[i][1])
    return [finalized[i] for i in order_]


@pytest.fixture(scope="module")
def model() -> Seq2SeqTransformer:
    return trained_toy_model()


CONSTRAINTS = [[[7, 8]], [], [[9], [10, 11]], [[12]], [[7]], [[13, 14, 15]], [[9], [9]], [[20], [21, 22]]]


@pytest.mark.parametrize("order", ["ordered", "unordered"])
@pytest.mark.parametrize("beam, alpha", [(4, 1.0), (2, 0.6), (5, 1.0)])
def test_constrained_beam_search_equals_fairseqs_step_by_step(model, order, beam, alpha):
    ids, pad = sources(8, seed=3)
    cfg = DecodingConfig(method="beam", num_beams=beam, n_best=beam, max_length=14, length_penalty=alpha,
                         constraints=order)
    out = generate(model, ids, pad, cfg, constraints=CONSTRAINTS)
    for i, constraints in enumerate(CONSTRAINTS):
        keep = ~pad[i]
        expected = fairseq_generate(model, ids[i : i + 1, keep], pad[i : i + 1, keep], constraints, order, beam, 14,
                                    alpha)
        assert expected  # fairseq returns fewer than `beam` where the limit came first; seqlab fills those slots
        for j, (tokens, score, lps) in enumerate(expected):
            n = int(out.lengths[i, j])
            assert out.sequences[i, j, :n].tolist() == tokens, (i, j)
            assert float(out.scores[i, j]) == pytest.approx(score, abs=1e-5)
            torch.testing.assert_close(out.token_logprobs[i, j, :n], torch.tensor(lps), atol=1e-5, rtol=0)


def contains(tokens: list[int], sequence: list[int]) -> bool:
    return any(tokens[i : i + len(sequence)] == sequence for i in range(len(tokens)))


@pytest.mark.parametrize("order", ["ordered", "unordered"])
def test_every_finished_hypothesis_contains_its_constraints(model, order):
    ids, pad = sources(8, seed=5)
    cfg = DecodingConfig(method="beam", num_beams=5, n_best=5, max_length=20, constraints=order)
    out = generate(model, ids, pad, cfg, constraints=CONSTRAINTS)
    for i, constraints in enumerate(CONSTRAINTS):
        for j in range(5):
            hyp = out.sequences[i, j, : out.lengths[i, j]].tolist()
            assert hyp[-1] == EOS_ID or j > 0  # the best has finished; others may be held at the limit
            if hyp[-1] != EOS_ID:
                continue
            rest = hyp
            for c in constraints:  # each occurrence is a distinct one: [[9], [9]] needs two 9s
                assert contains(rest, c), (i, j, hyp, constraints)
                at = next(k for k in range(len(rest)) if rest[k : k + len(c)] == c)
                rest = rest[at + len(c):] if order == "ordered" else rest[:at] + [-1] + rest[at + len(c):]


def test_a_source_without_constraints_decodes_as_fairseqs_plain_beam_search(model):
    ids, pad = sources(8, seed=3)
    cfg = DecodingConfig(method="beam", num_beams=4, n_best=4, max_length=14, constraints="unordered")
    out = generate(model, ids, pad, cfg)
    plain = generate(model, ids, pad, DecodingConfig(method="beam", num_beams=4, n_best=4, max_length=14,
                                                      force_eos="fairseq"))
    for i in range(8):
        keep = ~pad[i]
        expected = fairseq_generate(model, ids[i : i + 1, keep], pad[i : i + 1, keep], [], "unordered", 4, 14)
        assert [out.sequences[i, j, : out.lengths[i, j]].tolist() for j in range(4)] == [e[0] for e in expected]
    assert torch.equal(out.sequences[:, 0], plain.sequences[:, 0])  # its best equals seqlab's beam search here


def test_a_padded_row_equals_its_source_alone(model):
    ids, pad = sources(8, seed=4)
    cfg = DecodingConfig(method="beam", num_beams=3, n_best=3, max_length=14, constraints="ordered")
    out = generate(model, ids, pad, cfg, constraints=CONSTRAINTS)
    for i in (0, 2, 5, 7):
        keep = ~pad[i]
        alone = generate(model, ids[i : i + 1, keep], pad[i : i + 1, keep], cfg, constraints=[CONSTRAINTS[i]])
        n = int(alone.lengths[0, 0])
        assert torch.equal(alone.lengths[0], out.lengths[i])
        assert alone.sequences[0, :, :n].tolist() == out.sequences[i, :, :n].tolist()


def test_constraints_the_search_cannot_meet_leave_the_beams_held_at_the_limit(model):
    """fairseq asserts there; seqlab returns the beams it holds at the last step, without EOS. Here a banned
    token makes the first source's constraint impossible."""
    ids, pad = sources(2, seed=3)
    cfg = DecodingConfig(method="beam", num_beams=3, n_best=3, max_length=6, constraints="ordered",
                         bad_words_ids=[[8]])
    out = generate(model, ids, pad, cfg, constraints=[[[7, 8]], [[5]]])
    assert out.lengths[0].tolist() == [5, 5, 5]  # the limit's 6 tokens, less the EOS that could not come
    assert all(EOS_ID not in out.sequences[0, j, :5].tolist() for j in range(3))
    assert out.sequences[1, 0, out.lengths[1, 0] - 1] == EOS_ID  # the other source is not affected


def test_constraints_longer_than_the_length_limit_are_refused_naming_the_source(model):
    ids, pad = sources(2, seed=3)
    cfg = DecodingConfig(method="beam", num_beams=3, max_length=4, constraints="unordered")
    with pytest.raises(ConfigError, match="constraints of source 0 of the batch have 4 tokens, but its length "
                                          "limit is 4"):
        generate(model, ids, pad, cfg, constraints=[[[7, 8], [9, 10]], [[5]]])


@pytest.mark.parametrize("kwargs, message", [
    (dict(method="greedy", constraints="ordered"), "constrained beam search"),
    (dict(method="beam", num_beams=4, num_beam_groups=2, diversity_penalty=0.5, constraints="ordered"),
     "constrained beam search"),
    (dict(method="beam", num_beams=4, constraints="any"), "constraints"),
    (dict(method="beam", num_beams=4, early_stopping=False, constraints="ordered"), "early_stopping=true"),
    (dict(method="beam", num_beams=4, force_eos="hf", constraints="ordered"), "force_eos"),
    (dict(method="beam", num_beams=4, constraint_words=2), "constraints=ordered or unordered"),
    (dict(method="beam", num_beams=4, prefix_size=1, constraints="ordered"), "prefix_size"),
])
def test_settings_that_cannot_constrain_are_refused_naming_the_key(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        DecodingConfig(**kwargs)


def test_constraints_without_the_setting_or_empty_ones_are_refused(model):
    ids, pad = sources(2, seed=3)
    with pytest.raises(ConfigError, match="decoding.constraints is null"):
        generate(model, ids, pad, DecodingConfig(method="beam", num_beams=2), constraints=[[[5]], []])
    cfg = DecodingConfig(method="beam", num_beams=2, constraints="unordered")
    with pytest.raises(ConfigError, match="constraint 1 of source 0"):
        generate(model, ids, pad, cfg, constraints=[[[5], []], []])


def test_labels_name_the_constraint_order_and_words():
    assert DecodingConfig(method="beam", num_beams=5, constraints="ordered").label == "beam5_lp1_ordered"
    assert (DecodingConfig(method="beam", num_beams=5, constraints="unordered", constraint_words=2).label
            == "beam5_lp1_unordered2")


def test_an_ensemble_of_one_constrains_as_the_model(model):
    from seqlab.decoding.ensemble import Ensemble

    ids, pad = sources(8, seed=3)
    cfg = DecodingConfig(method="beam", num_beams=4, n_best=2, max_length=14, constraints="unordered")
    alone = generate(model, ids, pad, cfg, constraints=CONSTRAINTS)
    ensemble = generate(Ensemble([model]), ids, pad, cfg, constraints=CONSTRAINTS)
    assert torch.equal(alone.sequences, ensemble.sequences)
    torch.testing.assert_close(alone.scores, ensemble.scores, atol=1e-4, rtol=0)
