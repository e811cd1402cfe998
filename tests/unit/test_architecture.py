"""The layering docs/ARCHITECTURE.md describes, checked on the source: every import (lazy ones inside
functions included) follows its package order, no import cycle between seqlab's modules, the library never
imports the application layer, and every package the architecture names exists."""

from __future__ import annotations

import ast
import functools
import importlib
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
ROOT = SRC.parent


def module_name(path: Path, src: Path = SRC) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """module -> the seqlab modules it imports, anywhere in its body (a package's __init__ counts as the package)."""
    modules = {module_name(p, src): p for p in (src / "seqlab").rglob("*.py")}
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


def imported_names(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom | ast.Import):
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
    return names


def test_no_test_imports_a_script():
    """The profiling scripts in benchmarks/ are run, never imported; the experiments in pipelines/ are
    definitions, which tests may import."""
    scripts = {p.stem for p in (ROOT / "benchmarks").glob("*.py")}
    for path in (ROOT / "tests").rglob("*.py"):
        assert not any(n.split(".")[0] == "benchmarks" for n in imported_names(path)), path
    assert scripts  # the profiling scripts exist, and are run (tests/integration/test_bench.py), not imported


def test_seqlab_never_imports_the_pipelines():
    offenders = [p for p in (SRC / "seqlab").rglob("*.py")
                 if any(n.split(".")[0] == "pipelines" for n in imported_names(p))]
    assert offenders == []


def declared_order() -> list[str]:
    """The package order docs/ARCHITECTURE.md writes down, lowest first."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    line = re.search(r"\*\*Import order, lowest first:\*\*(.*?)\n\n", text, re.S)
    assert line, "docs/ARCHITECTURE.md has no 'Import order, lowest first:' paragraph"
    return re.findall(r"`(seqlab(?:\.\w+)?)`", line.group(1))


def package_of(module: str, order: list[str]) -> str | None:
    """The package of `order` that `module` is, or lies in (None: `seqlab` itself, `seqlab.__main__`)."""
    return next((p for p in order if module == p or module.startswith(p + ".")), None)


def violations(graph: dict[str, set[str]], order: list[str]) -> list[str]:
    """Every import of a package at or above the importer's own in `order` (its own package excepted)."""
    rank = {p: i for i, p in enumerate(order)}
    found = []
    for module, targets in sorted(graph.items()):
        own = package_of(module, order)
        if own is None:  # the entry points: python -m seqlab runs the application
            continue
        for target in sorted(targets):
            other = package_of(target, order)
            if other is not None and other != own and rank[other] > rank[own]:
                found.append(f"{module} imports {target} ({other} comes after {own})")
    return found


def test_every_import_follows_the_declared_package_order():
    order = declared_order()
    modules = import_graph()
    top = {m.split(".")[1] for m in modules if m.count(".") >= 1}
    assert {f"seqlab.{t}" for t in top} - {"seqlab.__main__"} <= set(order), "a package is missing from the order"
    assert violations(modules, order) == []


def test_the_order_check_catches_a_wrong_import_even_inside_a_function(tmp_path):
    """A source tree where a model module lazily imports the training loop: the check names that import,
    and only it (the training loop importing the model is in order)."""
    for package in ("seqlab", "seqlab/model", "seqlab/train"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "seqlab/train/module.py").write_text("from seqlab.model import layers\n")
    (tmp_path / "seqlab/model/layers.py").write_text("")
    (tmp_path / "seqlab/model/wrong.py").write_text("def build():\n    from seqlab.train.module import Seq2SeqModule\n")
    assert violations(import_graph(tmp_path), declared_order()) == [
        "seqlab.model.wrong imports seqlab.train.module (seqlab.train comes after seqlab.model)"]


def test_no_function_of_the_decoding_interop_and_inference_packages_runs_over_60_lines():
    """A function a reader can hold at once: a longer one in these packages is split where it is written."""
    long = [f"{path.relative_to(SRC)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for package in ("decoding", "interop", "inference")
            for path in sorted((SRC / "seqlab" / package).glob("*.py"))
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= 60]
    assert not long, long
