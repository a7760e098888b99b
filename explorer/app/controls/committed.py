"""The control values a redraw chain committed to, handed from its first event to the later ones.

Each event's inputs cost the page: Gradio's client looks every input component up in its tree of
~400 components (a depth-first search per input) and serialises its value, and a stage of the chain
used to take all 82 controls. The grid event, the chain's first, now stores the values it drew with
in a ``gr.State`` ("committed": kept on the server, nothing crosses the wire), *after* its own
updates of the controls (a ``causal`` box it flipped, a checkpoint it left), so that the stages read
exactly what the page shows once the grid is drawn; each stage takes that one input instead.
"""

from __future__ import annotations

from explorer.app.controls.fields import CONTROL_FIELDS


def _written(update):
    """(True, value) when an output writes a control's value (a plain value or an update with one)."""
    if isinstance(update, dict):
        return ("value" in update, update.get("value"))
    return True, update


def committed_values(values: dict, out: dict) -> dict:
    """``values`` as the page holds them once ``out`` (an event's ``{name: update}``) is applied."""
    after = dict(values)
    for name in CONTROL_FIELDS:
        if name in out:
            wrote, value = _written(out[name])
            if wrote:
                after[name] = value
    return after


def committing(handler):
    """``handler(values, **kw) -> out`` that also outputs "committed" (``committed_values``)."""

    def run(values: dict, **kw):
        out = handler(values, **kw)
        return {**out, "committed": committed_values(values, out)}

    return run


def from_committed(handler):
    """``handler(values, **kw)`` called with the chain's committed values (the "committed" input)."""

    def run(values: dict, committed=None, **kw):
        return handler(dict(committed) if committed else values, **kw)

    return run
