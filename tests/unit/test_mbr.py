"""MBR decoding: utility matrices and choices against per-pair calls of the reference metrics.

The reference is computed here, independently: sacreBLEU's `sentence_chrf` / `sentence_bleu` and
rouge-score's `RougeScorer(..., use_stemmer=True)` called once per (hypothesis, reference) pair, the
expected utility as their plain mean, the choice as the first maximum (what `mbrs`'s MBR decoder
computes with its chrF and BLEU metrics, which call the same sacreBLEU functions per pair).
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest
from rouge_score import rouge_scorer
from sacrebleu import sentence_bleu, sentence_chrf

from seqlab.config import ConfigError
from seqlab.decoding import DecodingConfig
from seqlab.decoding.mbr import MBRConfig, check_task, choose, ranked_distinct
from seqlab.metrics.utility import lcs_lengths, utility_matrix

DATA = Path(__file__).resolve().parents[2] / "data"
SCORER = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)
UTILITIES = ["chrf", "bleu", "rouge1", "rougeL"]


def reference_utility(utility: str, hyp: str, ref: str) -> float:
    if utility == "chrf":
        return sentence_chrf(hyp, [ref]).score
    if utility == "bleu":
        return sentence_bleu(hyp, [ref]).score
    return 100.0 * SCORER.score(ref, hyp)[utility].fmeasure  # rouge-score: (target, prediction)


def random_texts(rng: random.Random, n: int) -> list[str]:
    words = ["the", "a", "cat", "dog", "sat", "on", "mat", ".", ",", "running", "runs", "ran", "and", "of", "in",
             "God", "earth", "(", ")", "!", "“quoted”", "año", "niño", "3270"]
    lengths = [0, 1, 2, 3, 5, 8, 13, 21]
    return [" ".join(rng.choice(words) for _ in range(rng.choice(lengths))) for _ in range(n)]


def perturbed(rng: random.Random, text: str) -> str:
    """A plausible candidate: the text with a word dropped, repeated or swapped."""
    words = text.split()
    if len(words) < 2:
        return text
    i = rng.randrange(len(words) - 1)
    edit = rng.choice(["drop", "repeat", "swap", "keep"])
    if edit == "drop":
        del words[i]
    elif edit == "repeat":
        words.insert(i, words[i])
    elif edit == "swap":
        words[i], words[i + 1] = words[i + 1], words[i]
    return " ".join(words)


def bible_candidates(n_sources: int, n: int, seed: int = 0) -> list[list[str]]:
    """Real sentences: each source's two English references and perturbations of them."""
    rng = random.Random(seed)
    with gzip.open(DATA / "bible_es_en" / "test.jsonl.gz", "rt") as f:
        rows = [json.loads(next(f))["translation"] for _ in range(n_sources)]
    return [[perturbed(rng, rng.choice([r["en"], r["en-kjv"]])) for _ in range(n)] for r in rows]


def summary_candidates(n_sources: int, n: int, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    with gzip.open(DATA / "debian_pkg_summaries" / "test.jsonl.gz", "rt") as f:
        docs = [json.loads(next(f))["document"].split(". ")[0] for _ in range(n_sources)]
    return [[perturbed(rng, " ".join(d.split()[: rng.randint(3, 12)])) for _ in range(n)] for d in docs]


@pytest.mark.parametrize("utility", UTILITIES)
def test_utility_matrix_equals_the_reference_per_pair(utility):
    rng = random.Random(1)
    hyps = random_texts(rng, 30) + ["", " ", "a", "Hello, world!"]
    refs = random_texts(rng, 25) + ["", "the", "Hello world"]
    ours = utility_matrix(utility, hyps, refs)
    ref = np.array([[reference_utility(utility, h, r) for r in refs] for h in hyps])
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-9)


@pytest.mark.parametrize("utility", UTILITIES)
def test_utility_matrix_on_real_sentences(utility):
    lists = bible_candidates(3, 12) if utility in ("chrf", "bleu") else summary_candidates(3, 12)
    for cands in lists:
        ours = utility_matrix(utility, cands, cands)
        ref = np.array([[reference_utility(utility, h, r) for r in cands] for h in cands])
        np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-9)


def test_lcs_against_a_plain_dynamic_programme():
    rng = random.Random(3)
    seqs = [[rng.randrange(4) for _ in range(rng.randrange(0, 9))] for _ in range(12)]

    def lcs(a, b):
        table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
        for i in range(1, len(a) + 1):
            for j in range(1, len(b) + 1):
                table[i][j] = table[i - 1][j - 1] + 1 if a[i - 1] == b[j - 1] else max(table[i - 1][j],
                                                                                      table[i][j - 1])
        return table[-1][-1]

    ours = lcs_lengths(seqs, seqs[:7])
    assert ours.tolist() == [[lcs(a, b) for b in seqs[:7]] for a in seqs]


def reference_choice(utility: str, cands: list[str], refs: list[str]) -> tuple[np.ndarray, int]:
    eu = np.array([np.mean([reference_utility(utility, h, r) for r in refs]) for h in cands])
    return eu, int(np.argmax(eu))


@pytest.mark.parametrize("utility", UTILITIES)
@pytest.mark.parametrize("source", ["random", "real"])
def test_choice_and_expected_utilities_equal_an_independent_mbr(utility, source):
    rng = random.Random(7)
    if source == "random":
        lists = [random_texts(rng, 16) for _ in range(4)]
    else:
        lists = bible_candidates(4, 16) if utility in ("chrf", "bleu") else summary_candidates(4, 16)
    for cands in lists:
        for refs in (None, random_texts(rng, 5) if source == "random" else cands[::-1][:7]):
            choice = choose(utility, cands, refs)
            eu, best = reference_choice(utility, cands, cands if refs is None else refs)
            np.testing.assert_allclose(choice.expected_utility, eu, rtol=0, atol=1e-9)
            # the same choice; a reference maximum within rounding of another candidate's is a tie either way
            assert choice.chosen == best or abs(eu[choice.chosen] - eu[best]) < 1e-9


def test_ties_go_to_the_earlier_candidate_and_the_nbest_is_distinct():
    cands = ["a b c", "x y", "a b c", "x y", "a b d"]
    choice = choose("chrf", cands)
    assert choice.expected_utility[0] == choice.expected_utility[2]  # duplicates tie exactly
    assert choice.order.index(0) < choice.order.index(2) and choice.order.index(1) < choice.order.index(3)
    top = ranked_distinct(choice, 5)  # asks for 5, there are 3 distinct texts
    by_utility = sorted(set(cands), key=lambda text: -choice.expected_utility[cands.index(text)])
    assert [cands[i] for i in top] == by_utility


def test_duplicates_weigh_as_often_as_they_were_drawn():
    cands = ["the cat sat", "the cat sat", "the cat sat", "a dog ran far away"]
    eu, _ = reference_choice("bleu", cands, cands)
    np.testing.assert_allclose(choose("bleu", cands).expected_utility, eu, atol=1e-9)


def test_mbrs_agrees_where_installed():
    """`mbrs` (naist-nlp), when importable: its MBR decoder with its chrF and BLEU metrics."""
    decoders = pytest.importorskip("mbrs.decoders")
    metrics = pytest.importorskip("mbrs.metrics")
    for utility, metric in (("chrf", metrics.MetricChrF(metrics.MetricChrF.Config())),
                            ("bleu", metrics.MetricBLEU(metrics.MetricBLEU.Config()))):
        decoder = decoders.DecoderMBR(decoders.DecoderMBR.Config(), metric)
        for cands in bible_candidates(5, 16):
            theirs = decoder.decode(cands, cands, nbest=1)
            ours = choose(utility, cands)
            assert abs(ours.expected_utility[ours.chosen] - float(theirs.score[0])) < 1e-3  # mbrs: float32
            assert cands[ours.chosen] == theirs.sentence[0] or abs(
                ours.expected_utility[ours.chosen] - ours.expected_utility[theirs.idx[0]]) < 1e-3


@pytest.mark.parametrize(("values", "match"), [
    (dict(method="sample", mbr={"utility": "chrf", "candidates": 1}), "decoding.mbr.candidates=1"),
    (dict(method="sample", mbr={"utility": "meteor"}), "decoding.mbr.utility='meteor'"),
    (dict(method="sample", mbr={"utilty": "chrf"}), "decoding.mbr.utilty"),
    (dict(method="greedy", mbr={"utility": "chrf"}), "not method=greedy"),
    (dict(method="beam", num_beams=4, mbr={"candidates": 8}), "decoding.mbr.candidates=8 > num_beams=4"),
    (dict(method="beam", num_beams=8, mbr={"candidates": 8, "references": 8}), "decoding.mbr.references=8"),
    (dict(method="sample", n_best=4, mbr={"candidates": 2}), "decoding.n_best=4 > decoding.mbr.candidates=2"),
    (dict(method="sample", mbr={"candidates": "many"}), "decoding.mbr.candidates='many'"),
    (dict(method="sample", mbr=5), "decoding.mbr=5"),
])
def test_bad_mbr_settings_name_the_key(values, match):
    with pytest.raises(ConfigError, match=match):
        DecodingConfig(**values)


def test_rouge_utility_refused_for_translation():
    with pytest.raises(ConfigError, match="decoding.mbr.utility=rouge1 is a summarization metric"):
        check_task(MBRConfig(utility="rouge1"), "translation", "corpus bible_es_en")
    check_task(MBRConfig(utility="rouge1"), "summarization", "corpus debian")
    check_task(MBRConfig(utility="chrf"), "translation", "corpus bible_es_en")


def test_mbr_rows_and_labels():
    cfg = DecodingConfig(method="sample", epsilon=0.02, mbr={"utility": "chrf", "candidates": 32, "references": 16})
    assert (cfg.rows_per_source, cfg.hypotheses_per_source) == (48, 48)
    assert cfg.label == "mbr_chrf_c32_r16_sample_epsilon0.02"
    beam = DecodingConfig(method="beam", num_beams=8, mbr={"candidates": 6})
    assert (beam.rows_per_source, beam.hypotheses_per_source, beam.label) == (8, 6, "mbr_chrf_c6_beam8_lp1")
    assert DecodingConfig(**cfg.to_dict()) == cfg  # the dict a checkpoint or metrics.json keeps round-trips
