"""Every package the code imports is listed in the requirements a fresh machine installs.

A machine with packages installed globally hides a missing line (a test imported scipy, which
requirements-dev.txt did not list, and the README's test command collected nothing on a fresh
virtual environment). This reads every import statement, at module level and inside functions, and
maps each top-level module to the distribution that provides it.
"""

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# our own packages, and the helper modules tests import by name (pytest puts their folders on sys.path)
LOCAL = {"app", "explorer", "models", "kernels", "benchmarks", "tests", "conftest"} | {
    f.stem for f in (ROOT / "tests").rglob("*.py")
}
# Modules that come with another distribution or that code imports only behind a guard it tests.
OPTIONAL = {
    "spaces",  # ZeroGPU's package: imported only on a Space (requirements-dev lists it for the tests)
    "pyo3_runtime",  # the tokenizers extension's own exception module
}
# Imported only where a kernel is compiled for a CUDA GPU (kernels/triton/): torch's CUDA wheels bring their own
# triton, a CPU machine never imports it; requirements-dev lists it for the interpreter and compile tests.
GPU_ONLY = {"triton"}


def _requirements(name: str) -> set[str]:
    """Distribution names (normalised) a requirements file installs, following `-r` lines."""
    names: set[str] = set()
    for line in (ROOT / name).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-r "):
            names |= _requirements(line[3:].strip())
            continue
        names.add(_norm(re.split(r"[=<>!~;\[ ]", line, maxsplit=1)[0]))
    return names


def _norm(dist: str) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower()


def _imports(paths) -> dict[str, str]:
    """Top-level module -> first file importing it (absolute imports only; stdlib and local left out)."""
    found: dict[str, str] = {}
    std = set(sys.stdlib_module_names)
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in std or top in LOCAL or top in OPTIONAL or top.startswith("_"):
                    continue
                found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def _providers() -> dict[str, set[str]]:
    return {mod: {_norm(d) for d in dists} for mod, dists in metadata.packages_distributions().items()}


def _unlisted(paths, listed: set[str]) -> list[str]:
    providers = _providers()
    # a listed distribution also brings what it depends on: closing over requirements is what pip does
    closure = set(listed)
    frontier = list(listed)
    while frontier:
        dist = frontier.pop()
        try:
            requires = metadata.requires(dist) or []
        except metadata.PackageNotFoundError:
            continue
        for req in requires:
            if "extra ==" in req:
                continue
            dep = _norm(re.split(r"[=<>!~;\[ (]", req, maxsplit=1)[0])
            if dep not in closure:
                closure.add(dep)
                frontier.append(dep)
    bad = []
    for module, where in sorted(_imports(paths).items()):
        dists = providers.get(module, {_norm(module)})
        if not dists & closure:
            bad.append(f"{module} (imported by {where}; provided by {sorted(dists)})")
    return bad


def _py(*folders):
    for folder in folders:
        base = ROOT / folder
        yield from (base.rglob("*.py") if base.is_dir() else [base])


def test_every_package_the_tests_import_is_in_requirements_dev():
    assert not _unlisted(_py("tests", "benchmarks"), _requirements("requirements-dev.txt"))


def test_every_package_the_product_imports_is_in_requirements():
    unlisted = _unlisted(_py("app.py", "explorer", "models", "kernels"), _requirements("requirements.txt"))
    assert not [u for u in unlisted if u.split()[0] not in GPU_ONLY], unlisted


def test_the_gpu_only_packages_are_imported_by_the_triton_kernels_and_their_tools_alone():
    kernel_side = ("kernels/triton/", "kernels/tools/")
    for path in _py("app.py", "explorer", "models", "kernels"):
        where = str(path.relative_to(ROOT))
        if not where.startswith(kernel_side):
            assert not set(_imports([path])) & GPU_ONLY, where
    assert GPU_ONLY <= _requirements("requirements-dev.txt")


def test_the_check_sees_a_missing_line():
    # scipy is what a test once imported unlisted: against the runtime list alone it must be caught
    assert _unlisted(_py("tests/models/positions/test_floater.py"), _requirements("requirements.txt"))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
