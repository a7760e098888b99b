"""How an event reaches a handler: components by name, control values by field, the commit events.

Handlers are wired by name: each event's inputs are a *set* of components, Gradio passes them as one
dict, ``Components.handler`` turns it into ``{name: value}`` (control values under their
``ModelConfig`` field names) and maps the handler's ``{name: value}`` result back to components. The
page frame and every tab's ``wire`` use the same ``Components`` (``explorer.app.tabs.contract``).
"""

from __future__ import annotations

import gradio as gr

from explorer.app.controls.fields import CONTROL_FIELDS
from explorer.runtime.load import LOAD

QUIET = dict(api_visibility="undocumented")  # UI events: callable, not listed in the API page


class Components:
    """Components by name; ``handler(fn)`` adapts ``fn(values, **named) -> {name: value}``
    (``values``: the control values by field name) to Gradio's dict-in / dict-out convention."""

    def __init__(self, by_name: dict):
        self.by_name = by_name
        self.names = {comp: name for name, comp in by_name.items()}

    def __getitem__(self, name: str):
        return self.by_name[name]

    def __contains__(self, name: str) -> bool:
        return name in self.by_name

    def inputs(self, *names) -> set:
        return {self.by_name[name] for name in names}

    def outputs(self, *names) -> list:
        return [self.by_name[name] for name in names]

    def split(self, data: dict) -> tuple:
        """Gradio's ``{component: value}`` -> ``(control values by field, other values by name)``."""
        named = {self.names[comp]: value for comp, value in data.items()}
        return {name: named.pop(name) for name in CONTROL_FIELDS if name in named}, named

    def back(self, out: dict) -> dict:
        return {self.by_name[name]: value for name, value in out.items()}

    def handler(self, fn, rename: dict | None = None):
        rename = rename or {}

        def run(data: dict):
            values, named = self.split(data)
            with LOAD.busy():
                return self.back(fn(values, **{rename.get(k, k): v for k, v in named.items()}))

        return run


def picked(dropdown: gr.Dropdown):
    """The event of a user's pick in ``dropdown``. Gradio 6.31's dropdown fires ``input`` twice for
    one pick with the mouse (on the option, then again from the blur that closes the list), which
    ran every redraw twice; its ``blur`` fires once per pick, mouse or keyboard (and ``input``
    fired on every blur anyway, so nothing that committed before is lost)."""
    return dropdown.blur
