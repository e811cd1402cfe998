"""engine=seqlab_onednn in eval and translate: its own result folder and label, the same outputs."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from seqlab.app.evaluate import run_evaluation
from seqlab.app.translate import run_translate
from seqlab.config import ConfigError

from ..helpers import needs_onednn

pytestmark = needs_onednn
COMMON = ["logger=none", "decoding.max_length=10", "limit=8", "n_bootstrap=0"]


def test_eval_and_translate_with_onednn_linear_layers(make_cfg, smoke_checkpoint):
    ours = run_evaluation(make_cfg("eval", [f"ckpt={smoke_checkpoint}", "decoding=beam", *COMMON]))
    packed = run_evaluation(make_cfg("eval", [f"ckpt={smoke_checkpoint}", "decoding=beam", "engine=seqlab_onednn",
                                              *COMMON]))
    assert packed["label"] == ours["label"] + "_onednn" and packed["setting"]["engine"] == "seqlab_onednn"
    rows = {}
    for metrics in Path(make_cfg("eval", ["ckpt=x"]).results_dir).glob("**/metrics.json"):
        label = json.loads(metrics.read_text())["label"]
        rows[label] = [json.loads(r)["hypothesis"] for r in (metrics.parent / "hypotheses.jsonl").open()]
    assert rows[packed["label"]] == rows[ours["label"]]
    outs = []
    for overrides in ([], ["engine=seqlab_onednn"]):
        out = io.StringIO()
        run_translate(make_cfg("translate", [f"ckpt={smoke_checkpoint}", "decoding.max_length=10", *overrides]),
                      stdin=io.StringIO("En el principio creó Dios los cielos y la tierra.\n\nDios\n"), stdout=out)
        outs.append(out.getvalue())
    assert outs[0] == outs[1]


def test_onednn_with_another_precision_fails_before_loading(make_cfg, tmp_path):
    cfg = make_cfg("eval", [f"ckpt={tmp_path / 'missing.ckpt'}", "engine=seqlab_onednn", "precision=bf16", *COMMON])
    with pytest.raises(ConfigError, match="eval.engine=seqlab_onednn packs fp32 weights"):
        run_evaluation(cfg)


def test_engine_auto_takes_onednn_only_where_its_probe_is_faster_and_caches_the_probe(tmp_path, monkeypatch):
    import seqlab.engines.choice as engines

    speedups = iter([1.3])
    monkeypatch.setattr(engines, "search_speedup", lambda *_: next(speedups))  # a second probe would raise
    choice = engines.choose_engine("fp32", "cpu", tmp_path)
    assert choice.engine == "seqlab_onednn" and "1.30x" in choice.reason
    assert engines.choose_engine("fp32", "cpu", tmp_path) == choice  # from the cache: no second probe
    assert json.loads((tmp_path / engines.AUTO_CACHE).read_text())  # keyed by CPU, torch and threads
    for precision, device in (("bf16", "cpu"), ("int8", "cpu"), ("fp32", "cuda")):
        assert engines.choose_engine(precision, device, tmp_path).engine == "seqlab"  # oneDNN: fp32 on a CPU
    monkeypatch.setattr(engines, "search_speedup", lambda *_: 1.05)  # within the margin: the reference's sums stay
    assert engines.choose_engine("fp32", "cpu", None).engine == "seqlab"


def test_engine_auto_names_the_chosen_engine_in_the_label_and_folder(make_cfg, smoke_checkpoint, monkeypatch):
    import seqlab.engines.choice as engines

    monkeypatch.setattr(engines, "search_speedup", lambda *_: 3.0)
    cfg = make_cfg("eval", [f"ckpt={smoke_checkpoint}", "engine=auto", *COMMON])
    cfg.paths.cache_dir = str(Path(cfg.results_dir).parent / "probed_cache")  # not the session's real probe
    auto = run_evaluation(cfg)
    assert auto["label"].endswith("_onednn") and auto["setting"]["engine"] == "seqlab_onednn"
    monkeypatch.setattr(engines, "search_speedup", lambda *_: 0.8)
    cfg = make_cfg("eval", [f"ckpt={smoke_checkpoint}", "engine=auto", *COMMON])
    cfg.paths.cache_dir = str(Path(cfg.results_dir).parent / "fresh_cache")  # another machine's probe
    plain = run_evaluation(cfg)
    assert not plain["label"].endswith("_onednn") and "engine" not in plain["setting"]
    assert cfg.engine == "auto"  # chosen once and passed on: the composed config is left as written


def test_engine_auto_probes_the_rows_and_sources_it_is_asked_for_each_under_its_own_key(tmp_path, monkeypatch):
    """A batch and one source a call (greedy's 1 row, beam 5's 5) are probed apart and cached apart: here
    oneDNN wins a batch's beam search and one source's, and loses one source's greedy search."""
    import seqlab.engines.choice as engines
    from seqlab.engines.probe import BATCH_ROWS, BATCH_SOURCES

    probed = []

    def probe(rows, sources):
        probed.append((rows, sources))
        return {(5, BATCH_SOURCES): 1.3, (1, 1): 0.9, (5, 1): 1.35, (64, BATCH_ROWS // 64): 1.2}[rows, sources]

    monkeypatch.setattr(engines, "search_speedup", probe)
    assert engines.choose_engine("fp32", "cpu", tmp_path, rows=5).engine == "seqlab_onednn"
    assert engines.choose_engine("fp32", "cpu", tmp_path, rows=1, one_source=True).engine == "seqlab"
    one = engines.choose_engine("fp32", "cpu", tmp_path, rows=5, one_source=True)
    assert one.engine == "seqlab_onednn" and "a search of one source in 5 rows each" in one.reason
    assert engines.choose_engine("fp32", "cpu", tmp_path, rows=5, one_source=True) == one  # cached: no 4th probe
    assert probed == [(5, BATCH_SOURCES), (1, 1), (5, 1)]
    assert len(json.loads((tmp_path / engines.AUTO_CACHE).read_text())) == 3
    assert "a search of 5 sources in 64 rows each" in engines.choose_engine("fp32", "cpu", None, rows=64).reason
    assert probed[-1] == (64, 5)  # many rows a source (MBR's samples): fewer sources, a probe of BATCH_ROWS rows


def test_the_probe_times_whole_searches_of_the_asked_rows_on_both_engines_alternating(monkeypatch):
    """search_speedup runs seqlab's search itself, every row for PROBE_STEPS tokens, on the model and on its
    oneDNN copy in turn (a warm-up each, then `repeats` each), and returns the first's time over the second's."""
    import seqlab.engines.probe as probe
    from seqlab.model import ModelConfig
    from seqlab.model.onednn import PackedLinear

    calls, real = [], probe.search

    def spy(model, batch):
        out = real(model, batch)
        calls.append((any(isinstance(m, PackedLinear) for m in model.modules()), batch.cfg.num_beams,
                      tuple(batch.src_ids.shape), int(out.lengths.min()), int(out.lengths.max())))
        return out

    monkeypatch.setattr(probe, "search", spy)
    tiny = ModelConfig(src_vocab_size=64, d_model=32, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=64,
                       dropout=0.0)
    speedup = probe.search_speedup(3, 2, repeats=2, shape=tiny)
    assert speedup > 0
    assert [packed for packed, *_ in calls] == [False, True] * 3
    assert {tuple(rest) for _, *rest in calls} == {(3, (2, probe.PROBE_SOURCE_LEN), probe.PROBE_STEPS,
                                                   probe.PROBE_STEPS)}


def test_translate_on_a_terminal_chooses_its_engine_for_one_source_a_call(make_cfg, smoke_checkpoint, monkeypatch):
    import seqlab.engines.choice as engines

    asked = []

    def choose(precision, device, cache_dir, rows=1, one_source=False):
        asked.append((rows, one_source))
        return engines.EngineChoice("seqlab", "probed")

    monkeypatch.setattr("seqlab.app.infer.choose_engine", choose)

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for stdin, overrides, rows in ((io.StringIO("Dios\n"), [], (1, False)), (Terminal("Dios\n"), [], (1, True)),
                                   (io.StringIO("Dios\n"), ["chunk_size=1", "decoding=beam"], (5, True))):
        cfg = make_cfg("translate", [f"ckpt={smoke_checkpoint}", "engine=auto", "decoding.max_length=4", *overrides])
        run_translate(cfg, stdin=stdin, stdout=io.StringIO())
        assert asked[-1] == rows


def test_the_families_record_says_what_engine_auto_takes_in_each_case(monkeypatch):
    import seqlab.engines.choice as engines
    from seqlab.app.bench import AUTO_CASES, auto_choices

    monkeypatch.setattr(engines, "search_speedup", lambda rows, sources: 0.9 if (rows, sources) == (1, 1) else 1.3)
    auto = auto_choices()
    assert list(auto) == [where for where, *_ in AUTO_CASES]
    assert [choice["engine"] for choice in auto.values()] == ["seqlab_onednn", "seqlab_onednn", "seqlab",
                                                              "seqlab_onednn"]
    assert "a search of one source in 5 rows each" in auto["one source a call, beam 5"]["reason"]
