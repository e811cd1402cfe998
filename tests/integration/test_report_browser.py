"""The report in a real browser: headless Chromium loads the page, every image decodes, every table renders."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from seqlab.tracking.report import write_report
from seqlab.tracking.results import load_results
from tests.unit.test_study import make_study

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
# Runs in the page once everything has loaded; its verdict lands in the DOM that --dump-dom prints.
CHECK = """<script>window.addEventListener('load', () => {
  const images = [...document.images], tables = [...document.querySelectorAll('table')];
  const broken = images.filter(i => !(i.complete && i.naturalWidth > 0)).length;
  const empty = tables.filter(t => t.rows.length < 2 || t.getBoundingClientRect().height <= 0).length;
  const out = document.createElement('pre'); out.id = 'verdict';
  out.textContent = `images=${images.length} broken=${broken} tables=${tables.length} empty=${empty}`;
  document.body.appendChild(out);
});</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed: run `make install-browser`")
def test_report_renders_in_headless_chromium(tmp_path):
    make_study(tmp_path, {"baseline": {"tie_embeddings": "all"}, "tie_none": {"tie_embeddings": "none"}}, seeds=2)
    page = write_report(load_results(tmp_path / "results"), tmp_path / "report.html")
    checked = tmp_path / "checked.html"
    checked.write_text(page.read_text().replace("</body>", CHECK + "</body>"))
    profile = tmp_path / "profile"
    dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=5000",
                          "--dump-dom", checked.as_uri()], capture_output=True, text=True, timeout=120).stdout
    verdict = re.search(r"images=(\d+) broken=(\d+) tables=(\d+) empty=(\d+)", dom)
    assert verdict, dom[-2000:]
    images, broken, tables, empty = map(int, verdict.groups())
    assert images >= 4 and broken == 0 and tables >= 3 and empty == 0
    shot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--window-size=1280,2400",
                    f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120)
    assert shot.stat().st_size > 10_000
