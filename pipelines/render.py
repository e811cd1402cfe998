"""Every table a pipeline owns sits in the docs between markers, written here from the archive alone:

    <!-- table:NAME -->
    ...generated...
    <!-- /table:NAME -->
"""

from __future__ import annotations

import re
from pathlib import Path

from seqlab.pipeline.core import Pipeline

ROOT = Path(__file__).resolve().parents[1]


def marked(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- table:{re.escape(name)} -->\n)(.*?)(<!-- /table:{re.escape(name)} -->)", re.S)


def render(pipelines: list[Pipeline], check: bool = False, root: Path = ROOT) -> list[str]:
    """Write each table between its markers (or, with `check`, only compare); returns the tables that were
    out of date (or whose markers are missing)."""
    stale = []
    for pipeline in pipelines:
        for table in pipeline.tables:
            doc = root / table.doc
            text = doc.read_text() if doc.is_file() else ""
            pattern = marked(table.name)
            if not pattern.search(text):
                stale.append(f"{table.doc}: no markers for table {table.name}")
                continue
            body = table.render(root / pipeline.archive).rstrip("\n") + "\n"
            new = pattern.sub(lambda m, body=body: m.group(1) + body + m.group(3), text)
            if new != text:
                stale.append(f"{table.doc}: table {table.name}")
                if not check:
                    doc.write_text(new)
    return stale
