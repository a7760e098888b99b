"""The import graph of the project's packages has no cycle, lazy imports included.

Every module of ``models/``, ``kernels/`` and ``explorer/`` is parsed with ``ast``; every
``import`` / ``from ... import`` at any depth (module level, inside functions, under ``if``) is an
edge to the module it names: ``from pkg import name`` points at ``pkg.name`` when that is a
module, else at ``pkg``. A parent package is not an implicit edge (Python runs it first, but
counting it would make every package its own cycle). A cycle hidden by a late import is still a
cycle here.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("models", "kernels", "explorer")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict:
    """``{module name: path}`` of every module in the packages."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            out[_module_name(path)] = path
    return out


def _resolve(module: str, is_pkg: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([target] if target else []))


def import_graph(modules: dict) -> dict:
    """``{module: set of project modules it imports}`` (edges to outside modules dropped)."""
    graph = {}
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_pkg, node.level, node.module)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in modules:  # import a.b.c of a non-module attribute: the nearest module
                    t = t.rpartition(".")[0]
                if t and t != name:
                    edges.add(t)
        graph[name] = edges
    return graph


def find_cycle(graph: dict, nodes) -> list | None:
    """One cycle among ``nodes`` (following edges inside ``nodes`` only), or None."""
    nodes = set(nodes)
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n] & nodes):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(nodes):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


GRAPH = import_graph(_modules())


def _in(pkg: str) -> list:
    return [m for m in GRAPH if m == pkg or m.startswith(pkg + ".")]


def test_the_graph_is_read_at_every_depth():
    """The parser sees lazy imports: a function-level import in a known module is an edge."""
    src = "def f():\n    from .b import x\n"
    assert any(isinstance(n, ast.ImportFrom) for n in ast.walk(ast.parse(src)))
    assert find_cycle({"a": {"b"}, "b": {"a"}}, ["a", "b"]) == ["a", "b", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}, ["a", "b"]) is None
    assert "models.attention.layout" in GRAPH["models.attention.sparse"]


def test_models_has_no_import_cycle():
    assert find_cycle(GRAPH, _in("models")) is None


# kernels/bench_providers.py (another engineer's file) reads the pattern layouts of models; it moves to
# benchmarks/kernel_providers.py in that engineer's branch.


@pytest.mark.parametrize("module", sorted(_in("kernels")))
def test_kernels_imports_neither_models_nor_explorer(module):
    assert sorted(e for e in GRAPH[module] if e.split(".")[0] in ("models", "explorer")) == []


def test_models_imports_no_explorer():
    bad = {m: sorted(e for e in GRAPH[m] if e.split(".")[0] == "explorer") for m in _in("models")}
    assert {m: e for m, e in bad.items() if e} == {}


def test_no_import_cycle_across_all_packages():
    assert find_cycle(GRAPH, GRAPH) is None
