"""The import graph of the project's packages: no cycle, lazy imports included, and the layers kept.

Every module of ``models/``, ``kernels/`` and ``explorer/`` is parsed with ``ast``; every
``import`` / ``from ... import`` at any depth (module level, inside functions, under ``if``) is an
edge to the module it names: ``from pkg import name`` points at ``pkg.name`` when that is a
module, else at ``pkg``. A parent package is not an implicit edge (Python runs it first, but
counting it would make every package its own cycle). A cycle hidden by a late import is still a
cycle here.

On that graph: ``kernels`` imports neither ``models`` nor ``explorer``, ``models`` never ``explorer``;
inside ``explorer`` each layer imports only the layers below it (``LAYERS``); only ``explorer.app``
imports gradio; ``figures`` and ``export`` import no torch, ``analysis``, ``training`` and
``runtime`` neither gradio nor plotly; the API reaches the use cases, never a tab's handler; nothing
in the library imports ``benchmarks``; a name imported across modules is never ``_private``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from benchmarks.structure import import_graph  # the same reader the layout's numbers come from

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("models", "kernels", "explorer", "benchmarks")


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


def find_cycle(graph: dict, nodes) -> list | None:
    """One cycle among ``nodes`` (following edges inside ``nodes`` only), or None."""
    nodes = set(nodes)
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n] & nodes):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
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


# ---------------------------------------------------------------------------- the explorer's layers
# Each layer of explorer/ may import the layers listed for it (and itself), models and kernels.
LAYERS = {
    "explorer.runtime": set(),
    "explorer.analysis": {"explorer.runtime"},
    "explorer.training": {"explorer.runtime", "explorer.analysis"},
    "explorer.figures": {"explorer.runtime"},
    "explorer.export": {"explorer.figures"},
    "explorer.app": {
        "explorer.runtime",
        "explorer.analysis",
        "explorer.training",
        "explorer.figures",
        "explorer.export",
    },
    "explorer.reproduce": {"explorer.training"},
}
LIBRARY = ("models", "kernels", "explorer")


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "explorer" and len(parts) > 1 else None


def _externals(path: Path) -> set:
    """Top-level names of the outside packages a module imports (at any depth)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


MODULES = _modules()


def test_every_explorer_module_belongs_to_a_layer():
    assert sorted(m for m in _in("explorer") if m != "explorer" and _layer(m) not in LAYERS) == []


@pytest.mark.parametrize("module", sorted(m for m in _in("explorer") if _layer(m) in LAYERS))
def test_no_arrow_points_up_between_the_explorer_layers(module):
    own = _layer(module)
    bad = sorted(e for e in GRAPH[module] if _layer(e) not in (None, own) and _layer(e) not in LAYERS[own])
    assert bad == [], f"{module} imports a layer above it or beside it"


@pytest.mark.parametrize(
    "module", sorted(m for m in GRAPH if m.split(".")[0] in LIBRARY and not m.startswith("explorer.app"))
)
def test_only_the_app_imports_gradio(module):
    assert not {"gradio", "gradio_client"} & _externals(MODULES[module])


@pytest.mark.parametrize("module", sorted(_in("explorer.figures") + _in("explorer.export")))
def test_figures_and_export_import_no_torch(module):
    assert not {"torch", "kernels"} & _externals(MODULES[module])


@pytest.mark.parametrize(
    "module", sorted(_in("explorer.analysis") + _in("explorer.training") + _in("explorer.runtime"))
)
def test_analysis_training_and_runtime_import_neither_gradio_nor_plotly(module):
    assert not {"gradio", "plotly"} & _externals(MODULES[module])


def test_the_api_calls_use_cases_never_a_tab_handler():
    """``explorer.app.api.endpoints`` reaches the analyses and the export directly: no module of ``app/tabs``."""
    assert sorted(e for e in GRAPH["explorer.app.api.endpoints"] if e.startswith("explorer.app.tabs")) == []


def test_the_library_imports_no_benchmark():
    library = [m for m in GRAPH if m.split(".")[0] in LIBRARY]
    assert sorted(m for m in library if any(e.split(".")[0] == "benchmarks" for e in GRAPH[m])) == []


def test_shared_helpers_are_public():
    """A name imported from another module of the project never starts with an underscore."""
    bad = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LIBRARY:
                bad += [
                    f"{name}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert bad == []
