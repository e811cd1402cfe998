"""The report in a real browser: headless Chromium loads a report of 24 runs, a script injected into the page
drives it as a user would (sort by BLEU, group by method, filter, pick two runs) and records what the page
then shows; the test checks that record. Every image decodes and every table renders."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from seqlab.app.report import build_report
from seqlab.decoding import DecodingConfig
from seqlab.metrics import keys as K
from seqlab.metrics import sacrebleu_scores
from seqlab.tracking.results import OK, ResultDir

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
WORDS = ["in", "the", "beginning", "god", "created", "heaven", "and", "earth", "light", "was", "good", "day", "night"]
SETTINGS = [DecodingConfig(method="greedy"), *(DecodingConfig(method="beam", num_beams=k) for k in (2, 4, 8)),
            *(DecodingConfig(method="sample", temperature=t, seed=1) for t in (0.5, 0.7, 1.0)),
            DecodingConfig(method="sample", top_p=0.9, seed=1)]

# Runs once the page has loaded: acts on the page through its controls, then writes what it saw as JSON
# into <pre id="verdict">, which --dump-dom prints.
DRIVE = """<script>window.addEventListener('load', () => {
  const out = {};
  try {
  const rows = () => [...document.querySelectorAll('#runs tbody tr')];
  const bleuOf = (tr) => parseFloat(tr.querySelector('td[data-value]').dataset.value);
  const set = (id, value, kind) => { const n = document.getElementById(id); n.value = value;
    n.dispatchEvent(new Event(kind, {bubbles: true})); };
  out.width = document.querySelector('#runs').getBoundingClientRect().width;
  out.header = [...document.querySelectorAll('#runs th')].map((th) => th.textContent);
  out.rows = rows().length;
  document.querySelector('#runs th[data-key="bleu"]').click();  // sorted by BLEU: first click descending
  out.sortedBleu = rows().map(bleuOf);
  document.querySelector('#runs th[data-key="bleu"]').click();
  out.ascendingFirst = bleuOf(rows()[0]);
  set('group-by', 'decoding.method', 'change');
  out.groups = [...document.querySelectorAll('#runs tr.group')].map((tr) => tr.children[1].textContent);
  out.groupMeans = [...document.querySelectorAll('#runs tr.group')].map((tr) => tr.children[2].textContent);
  set('group-by', '', 'change');
  set('filter', 'method=beam num_beams=4', 'input');
  out.filtered = rows().map((tr) => tr.querySelector('td.name').textContent);
  set('filter', '', 'input');
  const pick = (name) => rows().find((tr) => tr.querySelector('td.name').textContent === name)
    .querySelector('input.pick').click();
  pick('BASE'); pick('OTHER');
  const cmp = document.getElementById('compare');
  out.compareTitle = cmp.querySelector('h2') && cmp.querySelector('h2').textContent;
  out.tests = [...cmp.querySelectorAll('table.tests tr')].slice(1)
    .map((tr) => [...tr.children].map((td) => td.textContent));
  out.examples = cmp.querySelectorAll('table.examples tr').length - 1;
  out.testsNote = [...cmp.querySelectorAll('p.note')].map((p) => p.textContent).join(' ');
  out.figures = [...cmp.querySelectorAll('table.figures td:first-child')].map((td) => td.textContent);
  pick('BASE'); pick('THIRD');  // now OTHER and THIRD: neither is the baseline, so they were not tested
  out.untested = document.getElementById('compare').textContent;
  out.charts = [...document.querySelectorAll('.chartbox')].map((b) => [b.id, b.querySelectorAll('svg circle').length,
    b.querySelectorAll('svg polygon').length]);
  const images = [...document.images];
  out.brokenImages = images.filter((i) => !(i.complete && i.naturalWidth > 0)).length;
  out.emptyTables = [...document.querySelectorAll('table')].filter((t) => t.rows.length < 2).length;
  } catch (err) { out.error = String(err) + ' ' + err.stack; }
  const pre = document.createElement('pre'); pre.id = 'verdict'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});</script>"""


def write_runs(root: Path) -> None:
    """24 evaluations of one test set: 8 decoding settings of 3 training runs (seeds), each with hypotheses
    and a training run folder holding its validation curve."""
    rng = random.Random(0)
    refs = [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(40)]
    for seed in range(3):
        run_dir = root / "runs" / f"baseline-seed{seed}"
        (run_dir / "csv").mkdir(parents=True)
        stopped = (250,) if seed == 1 else ()  # stopped and resumed: it also validated where it stopped
        (run_dir / "csv" / "metrics.csv").write_text("epoch,step,val/loss\n" + "".join(
            f"0,{s - 1},{5.0 - s / 100 + seed / 50}\n" for s in sorted((100, 200, 300, 400, *stopped))))
        ckpt = str(run_dir / "checkpoints" / "last.ckpt")
        for n, decoding in enumerate(SETTINGS):
            keep = 0.4 + 0.05 * n + 0.02 * seed
            hyps = [" ".join(w if rng.random() < keep else rng.choice(WORDS) for w in r.split()) for r in refs]
            scores = sacrebleu_scores(hyps, refs)
            out = ResultDir.for_setting(root / "results", ckpt, decoding.label, decoding.to_dict())
            out.write_hypotheses([{"id": str(i), "source": f"fuente {i}", "reference": r, "hypothesis": h}
                                  for i, (r, h) in enumerate(zip(refs, hyps, strict=True))])
            out.write_metrics({"status": OK, "label": decoding.label, "decoding": decoding.to_dict(), "split": "test",
                               "test_set": {"corpus": "bible", "split": "test"}, "metrics": {
                                   K.BLEU: scores[K.BLEU], K.ci(K.BLEU): [scores[K.BLEU] - 2, scores[K.BLEU] + 2],
                                   K.CHRF: scores[K.CHRF], K.HYP_SEQ_LOGPROB: -10.0 - n, K.HYP_LEN: 8.0,
                                   K.REF_LEN: 8.0, K.LENGTH_RATIO: 1.0},
                               "checkpoint": {"path": ckpt, "run_name": "arch_baseline", "seed": seed,
                                              "variant": "baseline", "model": {"positions": "sinusoidal"}}})


@pytest.mark.skipif(CHROMIUM is None and os.environ.get("SEQLAB_REQUIRE_BROWSER") != "1",
                    reason="Chromium is not installed: run `make install-browser` (CI requires it)")
def test_report_dashboard_sorts_groups_filters_and_compares_in_headless_chromium(tmp_path):
    assert CHROMIUM is not None, "SEQLAB_REQUIRE_BROWSER=1 but no chromium on PATH: run `make install-browser`"
    write_runs(tmp_path)
    page, _ = build_report(tmp_path / "results", tmp_path / "report.html", inspect=0)
    assert page.stat().st_size < 2_000_000 and page.with_suffix(".json").is_file()
    data = json.loads(page.with_suffix(".json").read_text())
    assert len(data["runs"]) == 24 and data["pairs"][0]["mode"] == "baseline"  # > 12 runs on one test set
    names = {r["id"]: r["name"] for r in data["runs"]}
    base = names[data["pairs"][0]["baseline"]]
    other = base.replace("/greedy", "/beam4_lp1")
    third = base.replace("/greedy", "/sample_temperature0.7")
    driven = tmp_path / "driven.html"
    script = DRIVE.replace("BASE", base).replace("OTHER", other).replace("THIRD", third)
    driven.write_text(page.read_text().replace("</body>", script + "</body>"))
    dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,900",
                          "--virtual-time-budget=10000", "--dump-dom", driven.as_uri()],
                         capture_output=True, text=True, timeout=180).stdout
    found = re.search(r'<pre id="verdict">(.*?)</pre>', dom, re.S)
    assert found, dom[-3000:]
    seen = json.loads(found.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    assert "error" not in seen, seen.get("error")
    assert seen["rows"] == 24 and seen["width"] <= 1400 - 2 * 24  # the runs table fits a 1,400 px window
    assert seen["header"][2].startswith("BLEU") and seen["header"][3].startswith("chrF")  # metrics come first
    assert seen["sortedBleu"] == sorted(seen["sortedBleu"], reverse=True)
    assert seen["ascendingFirst"] == min(seen["sortedBleu"])
    assert sorted(seen["groups"]) == ["method=beam (9 runs)", "method=greedy (3 runs)", "method=sample (12 runs)"]
    assert all(" ± " in m for m in seen["groupMeans"])
    assert sorted(seen["filtered"]) == [f"arch_baseline-seed{s}/beam4_lp1" for s in range(3)]
    assert seen["compareTitle"] == f"{base} vs {other}"
    metrics = {row[0]: row for row in seen["tests"]}
    assert set(metrics) == {"BLEU", "chrF", "ROUGE-L"} and metrics["BLEU"][4] != "" and metrics["ROUGE-L"][5] == "–"
    assert seen["examples"] == 5 and "log-prob/seq" in seen["figures"]
    assert "1,000 bootstrap resamples, 1,000 randomization trials" in seen["testsNote"]  # what the p-values took
    assert "tested against the baseline" in seen["untested"]
    charts = dict((name, (dots, bands)) for name, dots, bands in seen["charts"])
    assert charts["setting-chart"][0] >= 3 and charts["run-chart"][0] == 24
    assert charts["curve-chart"][1] == 1  # three seeds of one variant: one band, over the steps all three have
    assert seen["brokenImages"] == 0 and seen["emptyTables"] == 0
