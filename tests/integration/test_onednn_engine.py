"""engine=seqlab_onednn in eval and translate: its own result folder and label, the same outputs."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from seqlab.app.evaluate import run_evaluation
from seqlab.app.translate import run_translate
from seqlab.config import ConfigError
from seqlab.model.onednn import onednn_available

pytestmark = pytest.mark.skipif(not onednn_available(), reason="this torch build has no oneDNN packed linear")
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

    speedups = iter([2.0])
    monkeypatch.setattr(engines, "packed_speedup", lambda **_: next(speedups))  # a second probe would raise
    choice = engines.choose_engine("fp32", "cpu", tmp_path)
    assert choice.engine == "seqlab_onednn" and "2.00x" in choice.reason
    assert engines.choose_engine("fp32", "cpu", tmp_path) == choice  # from the cache: no second probe
    assert json.loads((tmp_path / engines.AUTO_CACHE).read_text())  # keyed by CPU, torch and threads
    for precision, device in (("bf16", "cpu"), ("int8", "cpu"), ("fp32", "cuda")):
        assert engines.choose_engine(precision, device, tmp_path).engine == "seqlab"  # oneDNN: fp32 on a CPU
    monkeypatch.setattr(engines, "packed_speedup", lambda **_: 1.14)  # under the margin: MKL stays
    assert engines.choose_engine("fp32", "cpu", None).engine == "seqlab"  # (a whole search slower at 1.14x)


def test_engine_auto_names_the_chosen_engine_in_the_label_and_folder(make_cfg, smoke_checkpoint, monkeypatch):
    import seqlab.engines.choice as engines

    monkeypatch.setattr(engines, "packed_speedup", lambda **_: 3.0)
    cfg = make_cfg("eval", [f"ckpt={smoke_checkpoint}", "engine=auto", *COMMON])
    cfg.paths.cache_dir = str(Path(cfg.results_dir).parent / "probed_cache")  # not the session's real probe
    auto = run_evaluation(cfg)
    assert auto["label"].endswith("_onednn") and auto["setting"]["engine"] == "seqlab_onednn"
    monkeypatch.setattr(engines, "packed_speedup", lambda **_: 0.8)
    cfg = make_cfg("eval", [f"ckpt={smoke_checkpoint}", "engine=auto", *COMMON])
    cfg.paths.cache_dir = str(Path(cfg.results_dir).parent / "fresh_cache")  # another machine's probe
    plain = run_evaluation(cfg)
    assert not plain["label"].endswith("_onednn") and "engine" not in plain["setting"]
    assert cfg.engine == "auto"  # chosen once and passed on: the composed config is left as written


def test_engine_auto_for_one_source_a_call_probes_that_steps_products_under_its_own_key(tmp_path, monkeypatch):
    """A command decoding one source a call (rows: greedy's 1, beam 5's 5) is probed at those rows through
    weights read from memory, cached apart from the batch probe: here oneDNN wins one source at a time only."""
    import seqlab.engines.choice as engines
    from seqlab.model.onednn import PROBE_SHAPES, one_source_shapes

    probed = []

    def probe(shapes=PROBE_SHAPES, **_):
        probed.append(shapes)
        return 1.2 if shapes == PROBE_SHAPES else 2.5

    monkeypatch.setattr(engines, "packed_speedup", probe)
    assert engines.choose_engine("fp32", "cpu", tmp_path).engine == "seqlab"
    one = engines.choose_engine("fp32", "cpu", tmp_path, rows=5)
    assert one.engine == "seqlab_onednn" and "one source a call in 5 rows" in one.reason
    assert engines.choose_engine("fp32", "cpu", tmp_path, rows=5) == one  # cached: no third probe
    assert probed == [PROBE_SHAPES, one_source_shapes(5)]
    assert all(m == 5 for m, _, _ in one_source_shapes(5)) and max(n for _, _, n in one_source_shapes(1)) >= 32000
    assert len(json.loads((tmp_path / engines.AUTO_CACHE).read_text())) == 2


def test_translate_on_a_terminal_chooses_its_engine_for_one_source_a_call(make_cfg, smoke_checkpoint, monkeypatch):
    import seqlab.engines.choice as engines

    asked = []

    def choose(precision, device, cache_dir, rows=None):
        asked.append(rows)
        return engines.EngineChoice("seqlab", "probed")

    monkeypatch.setattr("seqlab.app.infer.choose_engine", choose)

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for stdin, overrides, rows in ((io.StringIO("Dios\n"), [], None), (Terminal("Dios\n"), [], 1),
                                   (io.StringIO("Dios\n"), ["chunk_size=1", "decoding=beam"], 5)):
        cfg = make_cfg("translate", [f"ckpt={smoke_checkpoint}", "engine=auto", "decoding.max_length=4", *overrides])
        run_translate(cfg, stdin=stdin, stdout=io.StringIO())
        assert asked[-1] == rows


def test_the_families_record_says_what_engine_auto_takes_in_each_case(monkeypatch):
    import seqlab.engines.choice as engines
    from seqlab.app.bench import AUTO_CASES, auto_choices
    from seqlab.model.onednn import PROBE_SHAPES

    monkeypatch.setattr(engines, "packed_speedup", lambda shapes=PROBE_SHAPES, **_: 1.2 if shapes == PROBE_SHAPES
                        else 2.0 if shapes[0][0] == 1 else 1.4)
    auto = auto_choices()
    assert list(auto) == [where for where, _ in AUTO_CASES]
    assert [choice["engine"] for choice in auto.values()] == ["seqlab", "seqlab_onednn", "seqlab"]
    assert "one source a call in 5 rows" in auto["one source a call, beam 5"]["reason"]
