"""`seqlab compare` as a command: against sacreBLEU's paired tests, over seeds, and its error messages."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from seqlab.app.compare import main
from seqlab.metrics.significance import sacrebleu_seed
from tests.helpers import corpus, text_systems


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return text_systems(tmp_path)


def test_compare_equals_sacrebleu_paired_test(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp.json"
    assert main(["--refs", str(files["ref"]), "--refs", str(files["ref2"]), "--hyps", str(files["base"]),
                 str(files["better"]), "--json", str(out), "--seed", "777", "--n-ar", "2000"]) == 0
    got = json.loads(out.read_text())
    refs = [files["ref"].read_text().splitlines(), files["ref2"].read_text().splitlines()]
    systems = [("base.txt", files["base"].read_text().splitlines()),
               ("better.txt", files["better"].read_text().splitlines())]
    with sacrebleu_seed(777):
        _, bs = PairedTest(systems, {"bleu": BLEU(), "chrf": CHRF()}, refs, test_type="bs", n_samples=1000)()
        _, ar = PairedTest(systems, {"bleu": BLEU(), "chrf": CHRF()}, refs, test_type="ar", n_samples=2000)()
    for metric, key in (("bleu", "BLEU"), ("chrf", "chrF2")):
        for i, system in enumerate(got["systems"]):
            r = bs[key][i]
            assert system["metrics"][metric]["score"] == pytest.approx(r.score, abs=1e-9)
            assert system["metrics"][metric]["ci"] == pytest.approx([r.mean - r.ci, r.mean + r.ci], abs=1e-4)
        (c,) = [c for c in got["comparisons"] if c["metric"] == metric]
        assert (c["base"], c["system"]) == ("base.txt", "better.txt")
        assert c["delta"] == pytest.approx(bs[key][1].score - bs[key][0].score)
        assert c["p_bootstrap"] == pytest.approx(bs[key][1].p_value)
        assert c["p_ar"] == pytest.approx(ar[key][1].p_value)
    assert {c["metric"] for c in got["comparisons"]} == {"bleu", "chrf", "rouge1", "rouge2", "rougeL"}
    assert all(c["p_ar"] is None for c in got["comparisons"] if c["metric"].startswith("rouge"))


def test_cli_errors_are_messages_not_tracebacks(files: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    assert main(["--hyps", str(files["base"])]) == 2
    assert "--refs" in capsys.readouterr().err
    assert main([str(files["base"].parent)]) == 2
    assert "no hypotheses.jsonl" in capsys.readouterr().err


def test_compare_aggregates_result_folders_over_seeds(tmp_path: Path) -> None:
    refs, _ = corpus(n=40, seed=9)
    roots = []
    for variant, keep in (("base", 0.5), ("better", 0.9)):
        for seed in range(3):
            _, hyps = corpus(keep=keep, seed=100 + seed + (10 if variant == "better" else 0), refs=refs)
            folder = tmp_path / f"{variant}-seed{seed}" / "greedy-abc"
            folder.mkdir(parents=True)
            folder.joinpath("hypotheses.jsonl").write_text("".join(
                json.dumps({"id": str(i), "source": f"s{i}", "reference": r, "hypothesis": h}) + "\n"
                for i, (r, h) in enumerate(zip(refs, hyps, strict=True))))
            folder.joinpath("metrics.json").write_text(json.dumps(
                {"label": "greedy", "split": "test", "status": "ok",
                 "checkpoint": {"run_name": variant, "seed": seed, "variant": variant}}))
            roots.append(folder)
    out = tmp_path / "cmp.json"
    assert main([*map(str, roots), "--json", str(out), "--n-ar", "200"]) == 0
    got = json.loads(out.read_text())
    # each variant-seed run is compared with the baseline variant's run of the same seed
    pairs = {(c["base"], c["system"]) for c in got["comparisons"]}
    assert pairs == {(f"base-seed{s}/greedy", f"better-seed{s}/greedy") for s in range(3)}
    groups = {g["variant"]: g["metrics"]["bleu"] for g in got["seed_groups"]}
    per_seed = {s["name"]: s["metrics"]["bleu"]["score"] for s in got["systems"]}
    assert groups["base/greedy"]["values"] == {str(s): per_seed[f"base-seed{s}/greedy"] for s in range(3)}
    assert groups["better/greedy"]["mean"] == pytest.approx(np.mean([per_seed[f"better-seed{s}/greedy"]
                                                                      for s in range(3)]))
    (bleu_cmp,) = [c for c in got["seed_comparisons"] if c["metric"] == "bleu"]
    assert bleu_cmp["delta"] > 0 and bleu_cmp["exceeds_spread"]


def test_by_length_repeats_the_paired_bootstrap_on_each_buckets_segments(tmp_path: Path, capsys) -> None:
    refs, _ = corpus(n=40, seed=9)
    lengths = [10 + 2 * i for i in range(40)]  # 4 <= 16, 8 in 17-32, 16 in 33-64, 12 above
    roots = []
    for name, keep, seed in (("base", 0.5, 1), ("better", 0.9, 2)):
        _, hyps = corpus(keep=keep, seed=seed, refs=refs)
        folder = tmp_path / name / "greedy-abc"
        folder.mkdir(parents=True)
        folder.joinpath("hypotheses.jsonl").write_text("".join(
            json.dumps({"id": str(i), "source": f"s{i}", "reference": r, "hypothesis": h, "source_tokens": n})
            + "\n" for i, (r, h, n) in enumerate(zip(refs, hyps, lengths, strict=True))))
        roots.append(folder)
    out = tmp_path / "cmp.json"
    assert main([*map(str, roots), "--by-length", "--json", str(out), "--n-ar", "0", "--seed", "5"]) == 0
    got = json.loads(out.read_text())["by_length"]
    assert {k: v["n"] for k, v in got.items()} == {"src_le16": 4, "src_17_32": 8, "src_33_64": 16, "src_gt64": 12}
    idx = [i for i, n in enumerate(lengths) if n > 64]
    systems = [(f.parent.name, [json.loads(line)["hypothesis"] for line in
                                (f / "hypotheses.jsonl").read_text().splitlines()]) for f in roots]
    with sacrebleu_seed(5):  # sacreBLEU's own test on the longest bucket's segments alone
        _, bs = PairedTest([(n, [h[i] for i in idx]) for n, h in systems], {"bleu": BLEU(), "chrf": CHRF()},
                           [[refs[i] for i in idx]], test_type="bs", n_samples=1000)()
    for metric, key in (("bleu", "BLEU"), ("chrf", "chrF2")):
        (c,) = [c for c in got["src_gt64"]["comparisons"] if c["metric"] == metric]
        assert c["delta"] == pytest.approx(bs[key][1].score - bs[key][0].score)
        assert c["p_bootstrap"] == pytest.approx(bs[key][1].p_value)
    assert "> 64 (12 segments)" in capsys.readouterr().out

    (roots[1] / "hypotheses.jsonl").write_text("".join(  # evaluated before lengths were recorded
        json.dumps({"id": str(i), "source": f"s{i}", "reference": r, "hypothesis": r}) + "\n"
        for i, r in enumerate(refs)))
    assert main([*map(str, roots), "--by-length"]) == 2
    assert "better/greedy-abc has none" in capsys.readouterr().err
