"""The decoding features' bench times every feature beside the plain search it extends, on the same sources."""

from __future__ import annotations

from seqlab.bench.features import feature_bench, from_dict, to_dict
from seqlab.bench.speed import BenchConfig


def test_every_feature_is_timed_against_its_plain_search():
    cfg = BenchConfig(d_model=16, n_heads=2, layers=1, d_ff=32, vocab=60, decode_sources=3, seq_len=6,
                      max_new_tokens=4, num_beams=2, decode_repeats=1)
    rows = feature_bench(cfg)
    names = {r.name: r for r in rows}
    assert {"greedy", "beam2", "ensemble of 2, greedy", "ensemble of 3, greedy", "ensemble of 2, beam2",
            "coverage penalty wu, beam2", "contrastive search, top 4", "constrained search, no constraints, beam2",
            "2 constraints (unordered), beam2"} == set(names)
    assert names["greedy"].cost == 1.0 and names["beam2"].cost == 1.0
    assert all(r.seconds > 0 and r.tokens > 0 and r.sources == 3 for r in rows)
    assert names["ensemble of 2, beam2"].base_seconds == names["beam2"].seconds  # the same run's plain search
    assert from_dict(to_dict(rows)) == rows
