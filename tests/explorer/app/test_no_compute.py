"""The app layer wires Gradio to the library and computes nothing itself: no module under ``explorer/app``
imports torch (at module level or inside a function, ``import torch``, ``import torch.nn`` or ``from torch
import ...``), and no function there is a GPU call (decorated with ``explorer.runtime.device.gpu``, under any
name it was imported as). Tensors and GPU calls live in ``explorer.analysis`` and ``explorer.training``.

Read statically (``ast``: nothing is imported).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
APP = ROOT / "explorer" / "app"
GPU = "explorer.runtime.device.gpu"


def _dotted(node) -> str:
    """``a.b.c`` of a Name / Attribute chain (a call's callee: ``@gpu(duration=60)`` -> ``gpu``), else ""."""
    if isinstance(node, ast.Call):
        node = node.func
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    return ".".join([node.id, *reversed(parts)])


def offences(path: Path) -> list:
    """``["line: what"]`` for each torch import and each GPU-decorated function of one module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    aliases = {}  # local name -> the dotted name it stands for
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "torch" or a.name.startswith("torch."):
                    out.append(f"{node.lineno}: import {a.name}")
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "torch" or node.module.startswith("torch."):
                out.append(f"{node.lineno}: from {node.module} import ...")
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in node.decorator_list:
                name = _dotted(deco)
                head, _, rest = name.partition(".")
                full = aliases.get(head, head) + ("." + rest if rest else "")
                if full == GPU:
                    out.append(f"{node.lineno}: @{name} def {node.name} (a GPU call)")
    return out


def test_the_checker_finds_torch_and_gpu_calls_however_spelled(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import torch.nn as nn\nfrom explorer.runtime import device as d\n"
        "from explorer.runtime.device import gpu as on_gpu\n"
        "def f():\n    from torch import tensor\n\n"
        "@on_gpu(duration=60)\ndef g():\n    pass\n\n@d.gpu\ndef h():\n    pass\n\n"
        "@explorer.runtime.device.gpu\ndef k():\n    pass\n"
    )
    found = offences(bad)
    assert len(found) == 5, found
    good = tmp_path / "good.py"
    good.write_text(
        "from explorer.runtime.device import device\nimport torchvision_like\n@device\ndef f():\n    pass\n"
    )
    assert offences(good) == []


def test_no_app_module_imports_torch_or_defines_a_gpu_call():
    modules = sorted(APP.rglob("*.py"))
    assert len(modules) > 30  # the app is there: a wrong path would pass vacuously
    bad = [f"{p.relative_to(ROOT)}:{o}" for p in modules for o in offences(p)]
    assert not bad, (
        "explorer/app computes: move the tensors and GPU calls into explorer.analysis or "
        "explorer.training, and call them:\n" + "\n".join(bad)
    )
