"""``explorer.app.server.gradio_import``: gradio imported through ``explorer.app`` skips its type-stub writer.

Reference: Gradio's own behaviour in a fresh process: a component class defined in a module file makes Gradio
write a ``.pyi`` stub beside that file (``component_meta.create_or_modify_pyi``); after ``import explorer.app`` no
stub is written and the hook is the no-op, while a process that imports gradio first keeps Gradio's writer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

CODE = r"""
import json, sys
if sys.argv[1] == "app":
    import explorer.app  # noqa: F401  (what app.py's first import does)
import gradio.component_meta as meta
sys.path.insert(0, sys.argv[2])
import mycomponent  # noqa: F401  (a module defining a component class)
from explorer.app.server.gradio_import import no_stub, skip_stub_writer
print(json.dumps({"skipped": meta.create_or_modify_pyi is no_stub, "again": skip_stub_writer()}))
"""


def _run(first: str, folder: Path) -> dict:
    (folder / "mycomponent.py").write_text("import gradio as gr\n\n\nclass Shout(gr.HTML):\n    pass\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADIO_ANALYTICS_ENABLED": "False"}
    out = subprocess.run(
        [sys.executable, "-c", CODE, first, str(folder)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "stub": (folder / "mycomponent.pyi").exists()}


def test_through_the_app_no_stub_is_written(tmp_path):
    got = _run("app", tmp_path)
    assert got == {"skipped": True, "again": True, "stub": False}, got


def test_gradio_imported_first_keeps_its_writer(tmp_path):
    """The reference: Gradio's own import writes the stub (so the test above is not vacuous), and installing the
    skip afterwards says it cannot."""
    got = _run("gradio", tmp_path)
    assert got == {"skipped": False, "again": False, "stub": True}, got
