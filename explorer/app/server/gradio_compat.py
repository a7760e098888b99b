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
- ``bound_sessions(holder, owner, per_owner, total)``: replaces the holder's one eviction rule (the
  least recently used session of all, in ``StateHolder.update``) by a per-owner one, so a flood of new
  sessions from one client address evicts only that address's own sessions.
- ``shorten_errors(limit)``: Gradio's ``error_payload`` (the message an event's failure sends, also
  its own validation's, which quotes the refused value whole) cut to ``limit`` characters.
- ``queued_events(app, address)``: how many events of the queue (waiting or running) come from an address.
- ``fair_queue(queue, address_of, choose)``: which waiting event of a slot group starts next, chosen by
  ``choose`` (``explorer.runtime.fair.pick``) instead of the oldest first (``Queue.get_events``).
- ``header_timeout(seconds)``: uvicorn (Gradio's server) waits for a request's headers forever; a connection
  that has not sent a whole request head within ``seconds`` is closed.
- ``patient_self_check()``: ``launch()``'s check of its own address (``networking.url_ok``: a HEAD with a
  3 s timeout, whose time-out exits the app) made to wait for an answer while the server is busy.
- ``upload_folder()``, ``event_request()``: Gradio's upload cache, the running event's request.
"""

from __future__ import annotations

import datetime
import logging
import random
import time

from gradio.components.plot import PlotData
from gradio.processing_utils import save_bytes_to_cache
from gradio.utils import get_upload_folder

log = logging.getLogger(__name__)


def plot_data(figure_json: str) -> PlotData:
    """The value a ``gr.Plot`` sends for a Plotly figure's JSON."""
    return PlotData(type="plotly", plot=figure_json)


def cache_file(data: bytes, name: str) -> dict:
    """``data`` saved in Gradio's upload cache as ``name`` -> the ``FileData`` dict an API endpoint
    returns (``gradio_client`` downloads it)."""
    path = save_bytes_to_cache(data, name, get_upload_folder())
    return {"path": path, "orig_name": name, "meta": {"_type": "gradio.FileData"}}


def client_gone_probe(opened=None, unread_s: float = 5.0):
    """A no-argument check: has the browser / client of the running event gone away? Must be created
    in the event's context (it reads Gradio's per-event context variables); any surprise reads as
    "still connected". ``opened(event_id, session_hash)``: has someone opened the event's result stream?
    When given, an event whose stream is still unopened ``unread_s`` seconds after it joined the queue
    reads as gone too."""
    try:
        from gradio.context import LocalContext

        blocks, event_id = LocalContext.blocks.get(None), LocalContext.event_id.get(None)
    except Exception:
        return lambda: False
    if blocks is None or event_id is None:
        return lambda: False
    found: dict = {}

    def job():
        if "job" not in found:
            for job_set in blocks._queue.active_jobs:
                for j in job_set or []:
                    if getattr(j, "_id", None) == event_id:
                        found["job"] = j
        return found.get("job")

    def gone() -> bool:
        try:
            j = job()
            if j is None:
                return False
            if not j.alive:
                return True
            if opened is not None and time.monotonic() - j.enqueue_time > unread_s:
                return not opened(j._id, j.session_hash)
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
                getattr(holder, "explorer_owners", {}).pop(sid, None)
                session = holder.session_data.pop(sid, None)
                if session is not None:
                    dropped.append(session)
        kept = len(holder.session_data)
    return len(dropped), kept, _states(dropped)


def _states(sessions) -> list:
    return [(component, value) for session in sessions for component, value, _ in list(session.state_components)]


def bound_sessions(holder, owner, per_owner: int, total: int) -> None:
    """Evict ``holder``'s sessions per owner: a session is tagged with ``owner()`` (its client address)
    when it is created; past ``per_owner`` sessions of one owner, that owner's least recently used one
    goes; past ``total`` in all, the least recently used one of the owner holding the most. The evicted
    sessions' states get their delete callbacks (Gradio's own eviction skips them). Idempotent."""
    if getattr(holder, "explorer_owners", None) is not None:
        return
    owners: dict = {}
    holder.explorer_owners = owners

    def evict(sid, out):
        holder.time_last_used.pop(sid, None)
        owners.pop(sid, None)
        session = holder.session_data.pop(sid, None)
        if session is not None:
            out.append(session)

    def update(session_id: str) -> None:  # StateHolder.update's place: called by every holder[session_id]
        evicted: list = []
        with holder.lock:
            data = holder.session_data
            if session_id not in data:
                return
            data.move_to_end(session_id)
            if session_id not in owners:  # a new session: the only moment an owner's count grows
                who = owners[session_id] = owner()
                mine = [sid for sid in data if owners.get(sid) == who]
                for sid in mine[: max(0, len(mine) - per_owner)]:
                    evict(sid, evicted)
            while len(data) > total:
                counts: dict = {}
                for sid in data:
                    counts[owners.get(sid)] = counts.get(owners.get(sid), 0) + 1
                top = max(counts, key=counts.get)
                evict(next(sid for sid in data if owners.get(sid) == top and sid != session_id), evicted)
        for component, value in _states(evicted):  # outside the lock: a callback may touch files
            try:
                component.delete_callback(value)
            except Exception:
                log.exception("delete_callback of an evicted session failed")

    holder.capacity = max(holder.capacity, total)
    holder.update = update


def shorten_errors(limit: int) -> None:
    """Cut every error message Gradio sends (``error_payload``, in its routes and its queue) to ``limit``
    characters: its head and its tail, saying how much was left out. Idempotent."""
    import gradio.queueing
    import gradio.utils

    original = gradio.utils.error_payload
    if getattr(original, "explorer_limit", None) is not None:
        return

    def error_payload(error, show_error):
        content = original(error, show_error)
        text = content.get("error")
        if isinstance(text, str) and len(text) > limit:
            keep = max(1, limit // 2 - 20)
            content["error"] = f"{text[:keep]} … [{len(text) - 2 * keep:,} characters left out] … {text[-keep:]}"
        return content

    error_payload.explorer_limit = limit
    gradio.utils.error_payload = error_payload
    gradio.queueing.error_payload = error_payload


def queued_events(app, address_of, address: str) -> int:
    """Events in ``app``'s queue (waiting or running) whose request ``address_of`` names ``address``."""
    try:
        events = list(app.get_blocks()._queue.event_ids_to_events.values())
    except Exception:
        return 0
    return sum(1 for event in events if address_of(getattr(event, "request", None)) == address)


def waiting_events(app) -> int:
    """Events waiting (not yet started) in ``app``'s queue: what Gradio compares with the queue's ``max_size``."""
    try:
        return len(app.get_blocks()._queue)
    except Exception:
        return 0


def _queue_addresses(address_of) -> list:
    """The addresses (``address_of`` each event's request) of the running event's app's events, waiting or
    running ([] outside an event)."""
    try:
        from gradio.context import LocalContext

        blocks = LocalContext.blocks.get(None)
        events = list(blocks._queue.event_ids_to_events.values()) if blocks is not None else []
    except Exception:
        return []
    return [address_of(getattr(event, "request", None)) for event in events]


def events_of_current(address_of, address) -> int:
    """Events of the running event's app (waiting or running) whose request ``address_of`` names ``address``
    (0 outside an event)."""
    return _queue_addresses(address_of).count(address)


def others_in_queue(address_of, address) -> bool:
    """Whether the running event's app has an event (waiting or running) of another address than ``address``."""
    return any(a != address for a in _queue_addresses(address_of))


def upload_folder() -> str:
    """Gradio's upload cache: where its upload route writes (``<folder>/<content hash>/<name>``)."""
    return get_upload_folder()


def event_request():
    """The ``gr.Request`` of the event running in this context (None outside an event)."""
    try:
        from gradio.context import LocalContext

        return LocalContext.request.get(None)
    except Exception:
        return None


def fair_queue(queue, address_of, choose) -> None:
    """Replace ``queue.get_events`` (Gradio's ``Queue``: the oldest waiting event of a group with a free slot)
    by ``choose(waiting, running, limit)``: ``waiting`` the addresses of a group's waiting events (oldest
    first), ``running`` its running events per address, ``limit`` its slots (None: no limit) -> the index of
    the event to start, or None. A batched function keeps Gradio's rule. Idempotent."""
    if getattr(queue, "explorer_fair", False):
        return
    original = queue.get_events

    def get_events():
        try:
            groups = list(queue.event_queue_per_concurrency_id.items())
            random.shuffle(groups)
            for cid, event_queue in groups:
                waiting = event_queue.queue
                if not waiting:
                    continue
                if waiting[0].fn.batch:
                    return original()
                running: dict = {}
                for job_set in queue.active_jobs:
                    for event in job_set or []:
                        if event.concurrency_id == cid:
                            who = address_of(event.request)
                            running[who] = running.get(who, 0) + 1
                i = choose([address_of(e.request) for e in waiting], running, event_queue.concurrency_limit)
                if i is not None:
                    return [waiting.pop(i)], False, cid
            return None
        except Exception:
            log.exception("the fair queue failed; Gradio's order used")
            return original()

    queue.get_events = get_events
    queue.explorer_fair = True


def patient_self_check(wait_s: float = 60.0, read_s: float = 10.0) -> None:
    """``launch()`` checks that its own URL answers (``gradio.networking.url_ok``: HEAD with a 3 s timeout) and
    exits with "When localhost is not accessible, a shareable link must be created" when it does not: a server
    started on a busy host (visitors' requests already arriving, its cores taken) exited while serving. Here
    the check waits up to ``wait_s`` for an answer, and a connection the server accepted but answered late
    (a read time-out) counts as serving; a refused connection is still a failure. Idempotent."""
    import gradio.networking as networking
    import httpx

    if getattr(networking.url_ok, "explorer_patient", False):
        return

    def url_ok(url: str) -> bool:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                r = httpx.head(url, timeout=httpx.Timeout(read_s, connect=3.0), verify=False)
                if r.status_code in (200, 401, 301, 302, 303, 307, 308):
                    return True
            except httpx.ReadTimeout:
                return True  # accepted the connection: serving, only busy
            except (ConnectionError, httpx.HTTPError):
                pass
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)

    url_ok.explorer_patient = True
    networking.url_ok = url_ok


def header_timeout(seconds: float) -> None:
    """Close a connection of Gradio's uvicorn server that sent no whole request head within ``seconds`` of
    connecting (uvicorn's own ``timeout_keep_alive`` covers only the idle time after an answer: 1500 half-sent
    requests from one address were held open for good). Patches the HTTP protocols uvicorn may use
    (``h11``; ``httptools`` where installed). Idempotent."""
    classes = []
    try:
        from uvicorn.protocols.http.h11_impl import H11Protocol

        classes.append(H11Protocol)
    except ImportError:
        pass
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        classes.append(HttpToolsProtocol)
    except ImportError:
        pass
    for cls in classes:
        if getattr(cls.connection_made, "explorer_header_timeout", False):
            continue
        original = cls.connection_made

        def connection_made(self, transport, _original=original):
            _original(self, transport)

            def expire():
                if self.cycle is None and not transport.is_closing():  # no request head yet
                    transport.close()

            try:
                self.loop.call_later(seconds, expire)
            except Exception:
                log.exception("could not time out a connection's request head")

        connection_made.explorer_header_timeout = True
        cls.connection_made = connection_made
