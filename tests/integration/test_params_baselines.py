"""`seqlab params` and `seqlab baselines`: what they print, against independent computations."""

from __future__ import annotations

import re

import pytest

from seqlab.app import baselines, params


def test_params_prints_the_analytic_count_beside_the_built_models(capsys):
    """The Transformer base with a 37k shared vocabulary is about 63M parameters (Vaswani et al. report 65M
    with their vocabulary); the analytic and counted columns agree, T5's bias tables included."""
    params.main([])
    table = capsys.readouterr().out
    total = re.search(r"^total\s+([\d,]+)\s+([\d,]+)$", table, re.M)
    assert total and total.group(1) == total.group(2)
    assert 60e6 < int(total.group(1).replace(",", "")) < 66e6
    params.main(["--d_model", "64", "--n_heads", "4", "--encoder_layers", "1", "--decoder_layers", "1",
                 "--d_ff", "128", "--vocab", "100", "--positions", "t5"])
    small = capsys.readouterr().out
    assert re.search(r"^positions\s+256\s+256$", small, re.M)  # 2 stacks x 32 buckets x 4 heads
    with pytest.raises(SystemExit):
        params.main(["--positions", "rotary"])
    assert "invalid choice: 'rotary'" in capsys.readouterr().err


def test_baselines_prints_the_lead_baselines_rouge(capsys):
    """Lead (the first sentence of the document) on the Debian summaries, scored by rouge-score directly."""
    from rouge_score import rouge_scorer

    from seqlab.data.corpora import CorpusConfig, load_split
    from seqlab.metrics.rouge import lead

    baselines.main(["--split", "validation"])
    printed = dict(kv.split("=") for kv in capsys.readouterr().out.split())
    corpus = CorpusConfig(name="debian_pkg_summaries", kind="embedded", task="summarization",
                          path="debian_pkg_summaries", src_field="document", tgt_field="summary")
    examples = load_split(corpus, "validation")
    scorer = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True)
    rouge1 = 100 * sum(scorer.score(e.target, lead(e.source))["rouge1"].fmeasure for e in examples) / len(examples)
    assert float(printed["rouge1"]) == pytest.approx(rouge1, abs=0.05)
