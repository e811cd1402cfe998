"""The layering docs/ARCHITECTURE.md describes, checked on the source: no import cycle between seqlab's
modules (lazy imports inside functions included), the library never imports the application layer, and
every package the architecture names exists."""

from __future__ import annotations

import ast
import functools
import importlib
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
ROOT = SRC.parent


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the seqlab modules it imports, anywhere in its body (a package's __init__ counts as the package)."""
    modules = {module_name(p): p for p in (SRC / "seqlab").rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("seqlab"):
                for alias in node.names:  # `from seqlab.app import study` imports the module seqlab.app.study
                    sub = f"{node.module}.{alias.name}"
                    targets.add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.startswith("seqlab")}
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_even_through_lazy_imports():
    graph = {m: {t for t in ts if not (m.startswith(t + ".") and t.count(".") < m.count("."))}
             for m, ts in import_graph().items()}  # a module importing its own package's __init__ is not a cycle
    assert cycles(graph) == []


def test_the_library_never_imports_the_application_layer():
    offenders = {m: sorted(t for t in ts if t.startswith("seqlab.app"))
                 for m, ts in import_graph().items() if not m.startswith("seqlab.app") and m != "seqlab.__main__"}
    assert {m: ts for m, ts in offenders.items() if ts} == {}


def is_module(name: str) -> bool:
    path = SRC / name.replace(".", "/")
    return path.is_dir() or path.with_suffix(".py").is_file()


def test_every_package_and_module_the_architecture_names_exists():
    """Dotted names resolve to a module (and an attribute of it, for a name like seqlab.app.main.COMMANDS);
    paths (`model/config.py`, `conf/data/`) exist under the repository, src/seqlab or tests."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    names = set(re.findall(r"`(seqlab(?:\.\w+)+)`", text))
    paths = {p for p in re.findall(r"`([\w./]+)`", text) if "/" in p}
    assert len(names) >= 20 and len(paths) >= 15
    unresolved = []
    for name in sorted(names):
        parts = name.split(".")
        cut = next(i for i in range(1, len(parts) + 1) if i == len(parts) or not is_module(".".join(parts[: i + 1])))
        module = importlib.import_module(".".join(parts[:cut]))
        try:
            functools.reduce(getattr, parts[cut:], module)
        except AttributeError:
            unresolved.append(name)
    bases = (ROOT, SRC / "seqlab", ROOT / "tests")
    unresolved += [p for p in sorted(paths) if not any((base / p).exists() for base in bases)]
    assert unresolved == []


def test_no_test_imports_a_script():
    scripts = {p.stem for p in (ROOT / "benchmarks").glob("*.py")}
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                assert not any(n.split(".")[0] in ("benchmarks", "pipelines") for n in names), path
    assert scripts  # the profiling scripts exist, and are run (tests/integration/test_bench.py), not imported
