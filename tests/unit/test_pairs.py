"""The report's paired tests: every pair up to 12 runs, else each run against the baseline; the same p-values
as `seqlab compare`; the examples shown are those whose outputs differ most by sentence chrF."""

from __future__ import annotations

import random

import pytest
from sacrebleu.metrics import CHRF

from seqlab.analysis.compare import System, compare
from seqlab.analysis.pairs import pair_tests, pairs_to_test
from seqlab.metrics import keys as K

WORDS = ["in", "the", "beginning", "god", "created", "heaven", "and", "earth", "light", "was", "good", "day"]


def systems(n: int) -> list[System]:
    rng = random.Random(1)
    refs = [" ".join(rng.choice(WORDS) for _ in range(7)) for _ in range(30)]
    out = []
    for k in range(n):
        hyps = [" ".join(w if rng.random() < 0.4 + 0.1 * k else rng.choice(WORDS) for w in r.split()) for r in refs]
        out.append(System(f"s{k}", hyps, [refs], sources=[f"src {i}" for i in range(30)]))
    return out


def test_every_pair_up_to_the_limit_then_against_the_baseline():
    names = [f"r{i}" for i in range(13)]
    mode, pairs = pairs_to_test(names[:12])
    assert mode == "all" and len(pairs) == 12 * 11 // 2 and len(set(pairs)) == len(pairs)
    mode, pairs = pairs_to_test(names)
    assert mode == "baseline" and pairs == [("r0", b) for b in names[1:]]


def test_pair_tests_equal_seqlab_compare_and_examples_differ_most():
    found = pair_tests(systems(3))
    assert found.mode == "all" and found.baseline == "s0"
    tests = {(t.a, t.b, t.metric): t for t in found.tests}
    assert {(a, b) for a, b, _ in tests} == {("s0", "s1"), ("s0", "s2"), ("s1", "s2")}
    for base in (0, 1):  # seqlab compare with each run as the baseline gives the same numbers
        group = systems(3)[base:]
        report = compare(group, n_ar=1000)
        for c in report.comparisons:
            if c.metric in (K.BLEU, K.CHRF, K.ROUGEL):
                ours = tests[(c.base, c.system, c.metric)]
                assert ours.delta == pytest.approx(c.delta) and ours.p_bootstrap == pytest.approx(c.p_bootstrap)
                assert ours.p_ar == (None if c.p_ar is None else pytest.approx(c.p_ar))
    a, b = systems(3)[0], systems(3)[2]
    chrf = CHRF()
    gap = [abs(chrf.sentence_score(x, [r]).score - chrf.sentence_score(y, [r]).score)
           for x, y, r in zip(a.hypotheses, b.hypotheses, a.references[0], strict=True)]
    examples = found.examples["s0|s2"]
    assert len(examples) == 5 and all(e.a != e.b for e in examples)
    assert min(gap[e.id] for e in examples) >= sorted(gap, reverse=True)[4] - 1e-9
    assert examples[0].source == f"src {examples[0].id}" and examples[0].reference == a.references[0][examples[0].id]
