"""Gradio imported without writing its type stubs: about 1.2 s of CPU off the app's start-up.

Gradio 6.31's ``ComponentMeta`` calls ``component_meta.create_or_modify_pyi`` for every component class
it creates (about 80 at ``import gradio``, and every subclass defined later): it reads the class's source
file, parses the whole module with ``ast``, renders a Jinja template, then reads the ``.pyi`` stub beside
the source and writes it when it is missing or differs (into site-packages, or beside a visitor's own
module). Type checkers read those stubs; a running app never does. Measured on the 2-core machine:
``import gradio`` 2.8-3.6 s of CPU with the stub writer, 1.7 s without.

``skip_stub_writer()`` (called by ``explorer.app`` before any of its modules imports gradio) puts a finder
first on ``sys.meta_path`` that loads ``gradio.component_meta`` as Python would and then replaces its
``create_or_modify_pyi`` by a function that does nothing; the finder removes itself on that first use.
When gradio is already imported (its stubs were handled by then), or a later Gradio no longer has the
function, it changes nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

TARGET = "gradio.component_meta"
HOOK = "create_or_modify_pyi"


def no_stub(*_args, **_kwargs) -> None:
    """What ``create_or_modify_pyi`` becomes: nothing read, nothing written."""


class StubWriterSkip(importlib.abc.MetaPathFinder):
    """Finds ``gradio.component_meta`` once, with Python's own path finder, and wraps its loader so that the
    stub writer is replaced as soon as the module has run (before any component class is created)."""

    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            if callable(getattr(module, HOOK, None)):
                setattr(module, HOOK, no_stub)

        spec.loader.exec_module = exec_module
        return spec


def skip_stub_writer() -> bool:
    """Install the finder unless gradio's component module is already loaded or the finder is installed;
    True when Gradio's stub writer will be (or already is) skipped."""
    loaded = sys.modules.get(TARGET)
    if loaded is not None:
        return getattr(loaded, HOOK, None) is no_stub
    if not any(isinstance(f, StubWriterSkip) for f in sys.meta_path):
        sys.meta_path.insert(0, StubWriterSkip())
    return True
