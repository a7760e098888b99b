"""Idle sessions expire: Gradio's per-session copies are dropped after ``EXPLORER_SESSION_TTL`` seconds idle.

Gradio keeps one ``SessionState`` per browser session (``gradio.state_holder.StateHolder``:
``session_data`` and ``time_last_used``, refreshed by every event of the session): the values of
its ``gr.State`` components and a copy of every component's config, including the figures it was
sent (a few MB per loaded page). Gradio itself drops a session only when more than
``state_session_capacity`` exist (the least recently used of all, whoever made the others), so the app
replaces that rule (``gradio_compat.bound_sessions``, installed by ``explorer.app.server.request_limits``):
each client address keeps at most ``settings.sessions_per_client()`` sessions and a flood of new ones
evicts only its own. A ``gr.State``'s ``time_to_live`` frees that one value, never the session.
``start_expiry(demo)`` runs ``expire_idle`` in a daemon
thread: every session with no event for ``session_ttl()`` seconds (default one hour) is dropped,
its states' ``delete_callback`` run, and the freed heap handed back to the system.

A page whose session expired still works: its next event makes Gradio build a fresh session from
the app's defaults, whose state says the page shows the default figures. ``page_state`` tells
that state apart from a live one (the page-load chain marks a live state "seen"): an unseen state
outside the load chain means "what the page shows is unknown", so the next commit redraws every
figure and resends every control instead of skipping what it believes unchanged.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
import weakref

from explorer.app.server.gradio_compat import drop_idle_sessions, session_holder
from explorer.runtime import settings
from explorer.runtime.cache import release_memory

log = logging.getLogger(__name__)


def expire_idle(holder, ttl_s: float, now: datetime.datetime | None = None) -> int:
    """Drop the sessions of ``holder`` (Gradio's ``StateHolder``) idle for more than ``ttl_s``, run
    their states' delete callbacks, hand the freed heap back -> how many were dropped."""
    cutoff = (now or datetime.datetime.now()) - datetime.timedelta(seconds=ttl_s)
    n, kept, states = drop_idle_sessions(holder, cutoff)
    for component, value in states:  # outside the holder's lock: a callback may touch files
        try:
            component.delete_callback(value)
        except Exception:
            log.exception("delete_callback of an expired session failed")
    states.clear()
    if n:
        log.info("expired %d idle sessions (%d kept)", n, kept)
        release_memory()
    return n


def start_expiry(demo, ttl_s: float | None = None) -> threading.Thread:
    """A daemon thread expiring ``demo``'s idle sessions every ``ttl/4`` seconds (at most 60 s) once
    it is launched; it holds the app weakly and ends when the app is gone."""
    ttl = settings.session_ttl() if ttl_s is None else ttl_s
    period = max(0.5, min(60.0, ttl / 4))
    ref = weakref.ref(demo)

    def loop():
        while True:
            time.sleep(period)
            app = ref()
            if app is None:
                return
            holder = session_holder(app)
            del app
            if holder is not None:
                expire_idle(holder, ttl)

    thread = threading.Thread(target=loop, name="session-expiry", daemon=True)
    thread.start()
    return thread


def page_state(state, loading: bool):
    """The main state as the attention handler should read it (see the module docstring)."""
    if not isinstance(state, dict):
        return state
    if loading or state.get("seen"):
        return {**state, "seen": True}
    return {**state, "drawn": None, "ui": None, "seen": True}
