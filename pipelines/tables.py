"""Tables rendered from a pipeline's archive alone (results/<pipeline>/<stage>.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from seqlab.metrics import keys as K


def records(archive: Path) -> dict[str, dict[str, Any]]:
    """stage name -> its archived record (finished stages only)."""
    out = {}
    for path in sorted(archive.glob("*.json")):
        record = json.loads(path.read_text())
        if isinstance(record, dict) and record.get("status") == "ok" and "stage" in record:
            out[record["stage"]] = record
    return out


def with_interval(metrics: dict[str, Any], name: str) -> str:
    value, ci = metrics.get(name), metrics.get(K.ci(name))
    if not isinstance(value, int | float):
        return "–"
    return f"{value:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if isinstance(ci, list) else "")


def decodings_table(metrics: tuple[str, ...]) -> Any:
    """A renderer: one row per evaluation stage, named by the stage (unique within a pipeline; the labels of
    records archived before labels named no-repeat blocking can repeat), each metric with its interval, and
    the commit, CPU and updates each came from."""
    def render(archive: Path) -> str:
        found = [r for r in records(archive).values() if "metrics" in r["result"]]
        if not found:
            return missing(archive)
        rows = [[r["stage"], *(with_interval(r["result"]["metrics"], x) for x in metrics),
                 str(r["manifest"].get("updates") or "–"), commit_of(r["manifest"]), r["manifest"].get("cpu", "?")]
                for r in found]
        return table(["setting", *(f"{m} [95% CI]" for m in metrics), "updates", "commit", "CPU"], rows)
    return render


def commit_of(manifest: dict[str, Any]) -> str:
    """A manifest's commit as the tables show it: its first 10 digits, and "(dirty)" for an unclean tree."""
    return (manifest.get("commit") or "?")[:10] + ("" if manifest.get("clean") else " (dirty)")


Row = dict[str, Any]  # an archived record


def metric(record: Row, name: str, digits: int = 2, ci: bool = False) -> str:
    """One metric of an evaluation record ('–' when absent), with its interval if asked."""
    m = record["result"]["metrics"]
    if ci:
        return with_interval(m, name)
    value = m.get(name)
    return f"{value:.{digits}f}" if isinstance(value, int | float) else "–"


def paired_tests(found: dict[str, Row], compare_stage: str) -> dict[str, dict[str, Row]]:
    """An archived comparison's paired tests: evaluation stage -> metric -> {delta, p_bootstrap, p_ar}."""
    record = found.get(compare_stage)
    if record is None:
        return {}
    result = record["result"]
    stage_of = dict(zip((s["name"] for s in result["systems"]), result["stages"], strict=True))
    out: dict[str, dict[str, Row]] = {}
    for c in result["comparisons"]:
        out.setdefault(stage_of[c["system"]], {})[c["metric"]] = c
    return out


def significant(test: Row) -> bool:
    """p < 0.05 by every test that was run (paired bootstrap, and approximate randomization for BLEU/chrF)."""
    ps = [p for p in (test.get("p_bootstrap"), test.get("p_ar")) if p is not None]
    return bool(ps) and all(p < 0.05 for p in ps)


def delta(test: Row | None, digits: int = 2) -> str:
    """'+1.23 (p 0.001 / 0.001) *': the difference, its p-values (bootstrap / randomization), * if both < 0.05."""
    if test is None:
        return ""
    ps = " / ".join(f"{p:.3g}" for p in (test.get("p_bootstrap"), test.get("p_ar")) if p is not None)
    return f"{test['delta']:+.{digits}f} (p {ps})" + (" *" if significant(test) else "")


def ratio(x: float | None) -> str:
    """A speed ratio of a bench's table, '1.23x', or a dash where one side was not measured."""
    return "–" if x is None else f"{x:.2f}x"


def of(n: int | None, total: int) -> str:
    """'12 of 16' (outputs equal another's), or a dash where they were not compared."""
    return "–" if n is None else f"{n} of {total}"


def table(head: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|---" * len(head) + "|",
                      *("| " + " | ".join(r) + " |" for r in rows)])


def provenance(archive: Path, found: dict[str, Row], stages: list[str]) -> str:
    """One line under a table: the archive, and the commits, CPUs and model updates its rows came from."""
    mans = [found[s]["manifest"] for s in stages if s in found]
    commits = sorted({commit_of(m) for m in mans})
    cpus = sorted({m.get("cpu", "?") for m in mans})
    updates = sorted({m["updates"] for m in mans if m.get("updates")})
    return (f"_Archive `results/{archive.name}/`: commit {', '.join(commits)}; {'; '.join(cpus)}"
            + (f", model of {', '.join(f'{u:,}' for u in updates)} updates" if updates else "") + "._")


def missing(archive: Path) -> str:
    return f"_No archived run yet: `make pipeline NAME={archive.name}`._"


def gpu_archive(archive: Path) -> Path:
    """The archive of the experiment's GPU copy (`python -m pipelines NAME --device cuda`), beside its own."""
    from seqlab.pipeline.devices import GPU_SUFFIX

    return archive.parent / f"{archive.name}{GPU_SUFFIX}"


def gpu_note(archive: Path, stages: list[str]) -> str:
    """One line naming the GPU the rows' stages ran on, where the table renders from a GPU copy's archive."""
    found = records(archive)
    ran = [found[s] for s in stages if s in found and "comparisons" not in found[s]["result"]]  # not the tests
    devices = sorted({r["manifest"].get("device") or "the CPU" for r in ran})
    return (f"_Trained and decoded on {', '.join(devices)} (`results/{archive.name}/`): every run of this "
            "table on that kind of device, its baseline included._")
