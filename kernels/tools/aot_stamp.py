"""The stamp of the last full ahead-of-time compile check: a digest of what it compiled.

The full check (``python -m kernels.tools.aot_check``: every specialisation for sm_80 and sm_90)
takes minutes of CPU, and its answer changes only when what it compiles changes: the Triton kernel
modules (``kernels/triton/``), the spec list (``kernels/tools/aot_check.py``), the modules of
``kernels/`` those import (followed through their import statements, without importing anything),
or triton itself. :func:`digest` hashes exactly that: the files' paths and bytes and the installed
triton version.

``python -m kernels.tools.aot_check --stamp`` runs the full check and, when every specialisation
compiles and fits, writes the digest it started from to ``kernels/tools/aot_stamp.txt`` (tracked:
commit it with the kernel change). ``tests/kernels/tools/test_aot.py`` compares: the same digest
-> a smoke compile of each kernel once per target; a different one (or ``EXPLORER_AOT_FULL=1``)
-> the full check, and the test fails until the stamp is renewed.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[1]
STAMP = Path(__file__).with_name("aot_stamp.txt")
COMMAND = "python -m kernels.tools.aot_check --stamp"


def _module_file(base: Path, dotted: str | None) -> list[Path]:
    """The file(s) of ``dotted`` below ``base``: ``a/b.py`` or the package ``a/b/__init__.py``."""
    target = base.joinpath(*dotted.split(".")) if dotted else base
    return [p for p in (target.with_suffix(".py"), target / "__init__.py") if p.is_file()]


def _imports(path: Path) -> list[Path]:
    """The files of ``kernels`` that ``path`` imports (relative or ``kernels.``), at any depth in it."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                dotted = node.module
            elif node.module and node.module.split(".")[0] == KERNELS.name:
                base, dotted = KERNELS.parent, node.module
            else:
                continue
            out += _module_file(base, dotted)
            sub = base.joinpath(*dotted.split(".")) if dotted else base
            for alias in node.names:  # ``from ..triton import rope``: a submodule
                out += _module_file(sub, alias.name)
        elif isinstance(node, ast.Import):
            out += [
                f
                for a in node.names
                if a.name.split(".")[0] == KERNELS.name
                for f in _module_file(KERNELS.parent, a.name)
            ]
    return out


def sources() -> list[Path]:
    """Every file the full check's answer depends on, sorted."""
    todo = sorted((KERNELS / "triton").rglob("*.py")) + [KERNELS / "tools" / "aot_check.py"]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += _imports(path)
    return sorted(seen)


def triton_version() -> str:
    """The installed triton's version, read from its metadata (triton itself is not imported)."""
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def digest() -> str:
    """sha256 over the sources' paths (relative to the repository) and syntax trees, and triton's version.

    The tree (``ast.dump``: code and docstrings, without comments, layout or line numbers) is what decides what
    compiles, so reformatting the kernels or editing a comment keeps the stamp."""
    h = hashlib.sha256(f"triton {triton_version()}\n".encode())
    for path in sources():
        h.update(f"{path.relative_to(KERNELS.parent).as_posix()}\n".encode())
        h.update(ast.dump(ast.parse(path.read_text(encoding="utf-8"))).encode())
        h.update(b"\n")
    return h.hexdigest()


def stamped() -> str | None:
    """The digest of the last full pass, as the stamp file records it (None without one)."""
    if not STAMP.is_file():
        return None
    for line in STAMP.read_text().splitlines():
        if line.startswith("sha256 "):
            return line.split()[1]
    return None


def stale_reason() -> str | None:
    """None when the stamp matches the sources and triton; else what differs, in a sentence."""
    recorded, now = stamped(), digest()
    if recorded is None:
        return f"no stamp of a full pass ({STAMP.name} missing)"
    if recorded != now:
        return (
            f"the kernel sources or triton ({triton_version()}) changed since the last full pass "
            f"(stamp {recorded[:12]}, now {now[:12]})"
        )
    return None


def write(value: str) -> None:
    """Record ``value`` (the digest a passing full check started from) in the stamp file."""
    STAMP.write_text(
        f"# The last full `python -m kernels.tools.aot_check` pass; renewed by `{COMMAND}`.\n"
        f"sha256 {value}\ntriton {triton_version()}\n"
    )
