"""The few Gradio internals the app relies on, behind one door (checked against Gradio 6.31).

Gradio's public API does not offer these, so each is read defensively here and nowhere else: a
Gradio upgrade that moves one of them breaks this file only, and its tests say which.

- ``plot_data(json)``: a Plot component's value from a figure already serialised (the figure memo
  keeps JSON, so a redraw skips Plotly's validation and serialisation).
- ``cache_file(data, name)``: bytes into Gradio's file cache (aged out by ``delete_cache``), for an
  API endpoint that returns a file without a browser to run a clean-up step afterwards.
- ``client_gone_probe()``: has the client of the running event gone away? Gradio marks a running
  event's job not ``alive`` when its event stream closes, but neither cancels the task nor exposes the
  flag.
- ``drop_idle_sessions(demo, cutoff)``: Gradio keeps every session's states and outputs in its
  ``StateHolder`` and drops one only past ``state_session_capacity``; this drops those idle since
  ``cutoff`` and returns their ``(component, value)`` state pairs for the delete callbacks.
"""
from __future__ import annotations

import datetime

from gradio.components.plot import PlotData
from gradio.processing_utils import save_bytes_to_cache
from gradio.utils import get_upload_folder


def plot_data(figure_json: str) -> PlotData:
    """The value a ``gr.Plot`` sends for a Plotly figure's JSON."""
    return PlotData(type="plotly", plot=figure_json)


def cache_file(data: bytes, name: str) -> dict:
    """``data`` saved in Gradio's upload cache as ``name`` -> the ``FileData`` dict an API endpoint
    returns (``gradio_client`` downloads it)."""
    path = save_bytes_to_cache(data, name, get_upload_folder())
    return {"path": path, "orig_name": name, "meta": {"_type": "gradio.FileData"}}


def client_gone_probe():
    """A no-argument check: has the browser / client of the running event gone away? Must be created
    in the event's context (it reads Gradio's per-event context variables); any surprise reads as
    "still connected"."""
    try:
        from gradio.context import LocalContext
        blocks, event_id = LocalContext.blocks.get(None), LocalContext.event_id.get(None)
    except Exception:
        return lambda: False
    if blocks is None or event_id is None:
        return lambda: False

    def gone() -> bool:
        try:
            for job_set in blocks._queue.active_jobs:
                for job in job_set or []:
                    if getattr(job, "_id", None) == event_id:
                        return not job.alive
        except Exception:
            return False
        return False
    return gone


def session_holder(demo):
    """The ``StateHolder`` of a launched app (None before launch)."""
    return getattr(demo, "state_holder", None)


def drop_idle_sessions(holder, cutoff: datetime.datetime) -> tuple:
    """Remove the sessions of ``holder`` last used before ``cutoff`` -> ``(dropped, kept, states)``:
    how many were dropped and kept, and the ``(component, value)`` pairs of the dropped sessions' states."""
    dropped = []
    with holder.lock:
        for sid, used in list(holder.time_last_used.items()):
            if used < cutoff:
                holder.time_last_used.pop(sid, None)
                session = holder.session_data.pop(sid, None)
                if session is not None:
                    dropped.append(session)
        kept = len(holder.session_data)
    states = [(component, value) for session in dropped for component, value, _ in list(session.state_components)]
    return len(dropped), kept, states
