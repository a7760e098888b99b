"""Every code reference in the docstrings and the docs resolves: a dotted ``package.module.name`` names a
module of the repository and a name it defines (or imports), a ``path/file.py`` or ``folder/`` exists.

Read statically (``ast``: nothing is imported), over the product's packages and benchmarks, ``docs/*.md``
and ``README.md``; a module or a function that moved leaves its old name in a docstring, and this names it.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("explorer", "models", "kernels", "benchmarks")
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOTTED = re.compile(rf"^(?:{'|'.join(PACKAGES)})(?:\.[A-Za-z_][A-Za-z0-9_]*)+$")
PATH = re.compile(rf"^(?:{'|'.join(PACKAGES)}|docs|tests|assets)/[A-Za-z0-9_./-]*$")
SUBPACKAGES = tuple(p.name for p in (ROOT / "explorer").iterdir() if (p / "__init__.py").is_file())
INNER_PATH = re.compile(rf"^(?:{'|'.join(SUBPACKAGES)})/[A-Za-z0-9_./-]*\.py$")  # relative to explorer/
SHORT = re.compile(r"^[a-z_][a-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")  # module.name, the module by its own name
FILE = re.compile(r"\.(py|json|md|csv|html|safetensors|txt|js|css|png)$")
# words the docs use for a value, not a module, though a module bears the name: ``model.state_dict``
# (a torch module), ``maps.heads`` (an AttentionMaps), ``layout.meta`` (a Plotly layout), ...
VARIABLES = {"model", "maps", "layout", "trainer", "history", "tok", "tokenizer", "cfg", "loaded", "origin", "torch"}
DOC_SPAN = re.compile(r"``([^`\s]+?)``")  # reStructuredText literals in docstrings
MD_SPAN = re.compile(r"(?<!`)`([^`\s]+?)`(?!`)")  # Markdown code spans


def _clean(ref: str) -> str:
    """``a.b.c(x)`` -> ``a.b.c``; ``path/file.py:12`` -> ``path/file.py``; trailing punctuation dropped."""
    ref = ref.split("(")[0].split(":")[0].split("[")[0]
    return ref.rstrip(".,;")


@cache
def _module_file(dotted: str) -> Path | None:
    base = ROOT.joinpath(*dotted.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@cache
def _names(path: Path) -> dict:
    """Top-level names of a module: ``{name: the class's own names, or None}``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: dict = {}

    def scan(body):
        for node in body:
            if isinstance(node, ast.ClassDef):
                inner = set()
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        inner.add(item.name)
                        inner |= {
                            t.attr
                            for n in ast.walk(item)
                            if isinstance(n, (ast.Assign, ast.AnnAssign))
                            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                        }  # what __init__ sets: ``self.core = ...``
                    elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                        for t in item.targets if isinstance(item, ast.Assign) else [item.target]:
                            if isinstance(t, ast.Name):
                                inner.add(t.id)
                out[node.name] = inner
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[node.name] = None
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            out.setdefault(n.id, None)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    out.setdefault((alias.asname or alias.name).split(".")[0], None)
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                scan(node.body)
                for extra in getattr(node, "orelse", []), getattr(node, "finalbody", []):
                    scan(extra)
                for handler in getattr(node, "handlers", []):
                    scan(handler.body)

    scan(tree.body)
    return out


@cache
def _by_basename() -> dict:
    """``{module name: [its files]}`` over the packages (``surgery`` -> models/surgery.py, explorer/...)."""
    out: dict = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            name = path.parent.name if path.name == "__init__.py" else path.stem
            out.setdefault(name, []).append(path)
    return out


def resolves_short(ref: str) -> bool:
    """``module.name``: some module called ``module`` holds ``name`` (a word that is no module's name, a
    variable's attribute say, is not a reference and passes)."""
    module, name = ref.split(".")
    if module in VARIABLES or FILE.search(ref):
        return True
    files = _by_basename().get(module)
    return files is None or any(
        name in _names(f)
        or (
            f.name == "__init__.py"
            and ((f.parent / f"{name}.py").is_file() or (f.parent / name / "__init__.py").is_file())
        )
        for f in files
    )


def resolves(ref: str) -> bool:
    """Whether a dotted reference names a module of the repository and, after it, a name it holds."""
    parts = ref.split(".")
    for cut in range(len(parts), 0, -1):
        path = _module_file(".".join(parts[:cut]))
        if path is None:
            continue
        rest = parts[cut:]
        if not rest:
            return True
        names = _names(path)
        if rest[0] not in names:
            return False
        if len(rest) == 1:
            return True
        inner = names[rest[0]]
        return inner is None or rest[1] in inner  # deeper than a class's own names: not checked
    return False


def _docstrings(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.lineno if hasattr(node, "lineno") else 1, doc


def references() -> list:
    """``[(where, reference)]`` of every dotted name and repository path the docstrings and docs mention."""
    found = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for line, doc in _docstrings(path):
                for ref in DOC_SPAN.findall(doc):
                    found.append((f"{path.relative_to(ROOT)}:{line}", _clean(ref)))
    for path in DOCS:
        for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for ref in MD_SPAN.findall(text):
                found.append((f"{path.relative_to(ROOT)}:{n}", _clean(ref)))
    return [(w, r) for w, r in found if DOTTED.match(r) or PATH.match(r) or INNER_PATH.match(r) or SHORT.match(r)]


def _placeholder(ref: str) -> bool:
    """``assets/reproductions/NAME.json``, ``<name>.surgery.json``, ``*.safetensors``: a pattern, not a file."""
    return any(c in ref for c in "*<{") or bool(re.search(r"(^|/)[A-Z][A-Z_]+(\.|/|$)", ref))


def broken() -> list:
    out = []
    for where, ref in references():
        if _placeholder(ref):
            continue
        if PATH.match(ref):
            ok = (ROOT / ref).exists()
        elif INNER_PATH.match(ref):
            ok = (ROOT / "explorer" / ref).exists() or any((ROOT / pkg / ref).exists() for pkg in PACKAGES)
        elif DOTTED.match(ref):
            ok = resolves(ref)
        else:
            ok = resolves_short(ref)
        if not ok:
            out.append(f"{where}: {ref}")
    return out


def test_the_checker_tells_a_real_reference_from_a_moved_one():
    assert resolves("explorer.analysis.surgery.loss_change") and resolves("models.config.ModelConfig.replace")
    assert resolves("explorer.runtime.settings")
    assert not resolves("explorer.analysis.checkpoint_surgery.table") and not resolves("models.config.no_such_name")
    assert resolves_short("bundled.bundled_weights") and not resolves_short("bundled.no_such_function")
    assert resolves_short("parts.zoom") and resolves("models.blocks.Attention.core")  # a submodule, what __init__ sets
    assert resolves_short("cfg.window") and resolves_short("maps.py")  # a value's attribute, a file name
    assert len(references()) > 200  # the docs do name code: a pattern that found nothing would pass vacuously


def test_every_reference_in_docstrings_and_docs_resolves():
    bad = broken()
    assert not bad, "references to code that is not there:\n" + "\n".join(bad)


if __name__ == "__main__":
    print("\n".join(broken()) or "every reference resolves")
