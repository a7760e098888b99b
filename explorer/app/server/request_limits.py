"""Request bodies, bare uploads and queue places, bounded per request and per client address.

``RequestLimits`` is an ASGI middleware on Gradio's FastAPI app (``LAUNCH_OPTIONS["app_kwargs"]``). For
every HTTP request it sets ``visitors.CURRENT`` (Gradio's session store tags new sessions with it: on
the first request it bounds the store per address, ``gradio_compat.bound_sessions``, at
``settings.sessions_per_client()`` sessions each and ``state_session_capacity`` in all) and:

- a body larger than its cap is answered 413 before it is read: ``settings.max_body()`` (1 MB) for
  every route but the upload route, ``upload_cap()`` (the checkpoint upload's cap plus 1 MB of form
  overhead) for the upload route; a body without a length is counted as it arrives and cut at the cap;
- one address may send at most ``CLIENT_BODY_BYTES`` of bodies at once, and may hold at most
  ``CLIENT_UPLOADS`` times ``upload_cap()`` of uploads not yet aged out (429 beyond);
- a request joining the queue from an address that already has ``settings.events_per_client()``
  events waiting or running, or joins still on their way into the queue (joins sent all at once), is
  answered 429 before it takes a queue place; one from an address holding any when only the queue's
  reserved last quarter is left is answered 503, as Gradio answers a full queue (``reserved``: so addresses
  that filled the rest never make a newcomer read "Queue is full"), and a request naming a
  new session from an address that made ``settings.new_sessions_per_minute()`` (60) in the last
  minute is answered 429 before Gradio builds it;
- a query string over ``PAGE_QUERY_BYTES`` (Gradio's root-url code answers a bare 500 past 64 KB) is
  dropped from a page request and replaced by its length for an event, whose share-link reader refuses
  it with the notice of any over-long link;
- a request with both ``Content-Length`` and ``Transfer-Encoding`` is refused (400: conflicting framing);
  a GET that opens a result stream is recorded (``streams.STREAMS``: work nobody reads is stopped);
- an error answer longer than ``ERROR_CHARS`` is cut (FastAPI's validation, which quotes the refused
  input whole, told by field and message only); Gradio's 500 for an event that could not take its input
  becomes a 400, and an exception escaping a route (malformed input Gradio does not check) is answered
  400 with its type, never a 500 with its text.

Uploads: the upload route's answer names the files it stored (``<upload cache>/<content hash>/<name>``);
``UPLOADS`` records each with its addresses and time, and ``sweep`` (a daemon thread, ``start_sweeper``)
deletes the recorded files older than ``settings.upload_ttl()`` (5 min): only paths the upload route
returned, only inside Gradio's upload cache, never a link. Handlers read or copy an upload when their
event runs, so what is left after minutes is unclaimed. ``owns(path, address)`` tells whether an address
uploaded a path.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
import weakref
from urllib.parse import urlencode

from explorer.analysis.weights import checkpoint_upload
from explorer.app.server import gradio_compat, visitors
from explorer.app.server.streams import STREAMS
from explorer.runtime import settings

log = logging.getLogger(__name__)

CLIENT_BODY_BYTES = 32 << 20  # bodies one address may be sending at once (uploads and the rest)
CLIENT_UPLOADS = 4  # uploads not yet aged out, per address, in multiples of upload_cap()
BODY_IDLE_S = 30.0  # a request body that stops arriving this long is answered 408
ERROR_CHARS = 1000  # an error answer longer than this is cut
HELD_BYTES = 2 << 20  # of an error answer, at most this much is held to be read and cut
JOIN_SUFFIXES = ("/queue/join",)
# A query string longer than this is not handed to Gradio whole (``_long_query``): its root-url code answers
# a bare 500 for a URL over 64 KB; the share link's reader (``explorer.app.controls.share``) caps links far below.
PAGE_QUERY_BYTES = 16 << 10

# what is sent to Gradio in place of a query string too long to hand on: its length
# (explorer.app.controls.share reads it)
LONG_LINK_PARAM = "__link_chars"


def upload_cap() -> int:
    """Bytes of one upload request: the checkpoint upload's cap (all its files in one form) plus 1 MB."""
    return checkpoint_upload.max_bytes() + (1 << 20)


def _joins_queue(path: str) -> bool:
    return path.endswith(JOIN_SUFFIXES) or "/call/" in path


def _makes_sessions(path: str) -> bool:
    """The routes whose body's ``session_hash`` makes Gradio create that session if it is new."""
    return _joins_queue(path) or "/run/" in path or "/api/" in path or path.rstrip("/").endswith("/component_server")


async def _read_whole(receive, cap: int):
    """The request's body read whole (at most ``cap`` bytes) -> a ``receive`` that hands it on again
    (``.body`` holds it), or None past the cap."""
    chunks, total = [], 0
    while True:
        try:
            message = await asyncio.wait_for(receive(), BODY_IDLE_S)
        except asyncio.TimeoutError:
            raise _Stalled from None
        if message.get("type") != "http.request":
            break
        chunks.append(message.get("body", b""))
        total += len(chunks[-1])
        if total > cap:
            return None
        if not message.get("more_body"):
            break
    body, given = b"".join(chunks), False

    async def replay():
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    replay.body = body
    return replay


def _session_allowed(app, body: bytes, address: str) -> bool:
    """False when the body names a session Gradio does not hold yet and ``address`` has made
    ``settings.new_sessions_per_minute()`` new ones in the last minute."""
    holder = getattr(app, "state_holder", None)
    try:
        session = json.loads(body).get("session_hash") if body[:1] == b"{" else None
    except (ValueError, AttributeError):
        return True  # Gradio answers a malformed body itself
    if not isinstance(session, str) or holder is None or session in holder.session_data:
        return True
    return visitors.NEW_SESSIONS.allow(address)


def _long_query(query: bytes, path: str) -> bytes:
    """A query string over ``PAGE_QUERY_BYTES`` as Gradio is given it: none for the page itself (its HTML
    needs none), its length alone for an event (Gradio's client sends the page's query with each event;
    the share link's reader, ``explorer.app.controls.share.from_query``, refuses it as any over-long link)."""
    if "/gradio_api/" not in path:
        return b""
    return urlencode({LONG_LINK_PARAM: len(query)}).encode()


class Uploads:
    """The upload route's files: path -> (addresses that uploaded it, last upload time, bytes)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._files: dict = {}
        self._pending: dict = {}  # address -> bytes of uploads being received

    def used(self, address: str) -> int:
        with self._lock:
            kept = sum(size // len(who) for who, _, size in self._files.values() if address in who)
            return kept + self._pending.get(address, 0)

    def begin(self, address: str, size: int) -> bool:
        """Reserve ``size`` bytes of uploads for ``address``; False when that passes its allowance."""
        allowance = CLIENT_UPLOADS * upload_cap()
        if self.used(address) + size > allowance:
            return False
        with self._lock:
            self._pending[address] = self._pending.get(address, 0) + size
        return True

    def end(self, address: str, size: int, paths, now: float | None = None) -> None:
        """The upload of ``address`` is over: its reservation released, its stored ``paths`` recorded."""
        now = time.time() if now is None else now
        with self._lock:
            left = self._pending.get(address, 0) - size
            if left > 0:
                self._pending[address] = left
            else:
                self._pending.pop(address, None)
            for p in paths:
                who, _, old = self._files.get(p, (frozenset(), 0.0, 0))
                self._files[p] = (who | {address}, now, max(old, size // max(1, len(paths))))

    def owns(self, path, address: str | None) -> bool:
        with self._lock:
            entry = self._files.get(str(path))
        return entry is not None and address in entry[0]

    def known(self, path) -> bool:
        with self._lock:
            return str(path) in self._files

    def sweep(self, ttl_s: float, root: str, now: float | None = None) -> int:
        """Delete the recorded uploads older than ``ttl_s`` -> how many files were deleted."""
        cutoff = (time.time() if now is None else now) - ttl_s
        with self._lock:
            old = [p for p, (_, t, _) in self._files.items() if t < cutoff]
            for p in old:
                del self._files[p]
        root = os.path.realpath(root)
        deleted = 0
        for p in old:
            folder = os.path.dirname(p)
            if os.path.realpath(os.path.dirname(folder)) != root or os.path.islink(p) or os.path.islink(folder):
                continue  # only <root>/<content hash>/<name>, as the upload route writes them
            try:
                os.remove(p)
                deleted += 1
            except OSError:
                pass
            try:
                os.rmdir(folder)  # only when empty
            except OSError:
                pass
        return deleted


UPLOADS = Uploads()
_IN_FLIGHT: dict = {}  # address -> body bytes being received
_IN_FLIGHT_LOCK = threading.Lock()


def _reserve(address: str, size: int) -> bool:
    with _IN_FLIGHT_LOCK:
        if _IN_FLIGHT.get(address, 0) + size > CLIENT_BODY_BYTES:
            return False
        _IN_FLIGHT[address] = _IN_FLIGHT.get(address, 0) + size
        return True


_JOINING: dict = {}  # address -> queue joins past the check whose event may not be in Gradio's queue yet


def _join(address: str, queued: int, cap: int, total: int = 0, size: int | None = None) -> int:
    """Counts one more queue join of ``address`` unless its ``queued`` events plus the joins still on their way
    reach ``cap``, or the queue (``total`` events waiting of ``size`` places) has only its reserved last quarter
    left and the address holds any; -> 0 when counted, else what it holds. Joins sent all at once each pass a check
    of the queue alone before any of them is queued (30 concurrent joins from one address all got in, filling
    the queue); the reserve keeps places for a newcomer however many addresses filled the rest."""
    with _IN_FLIGHT_LOCK:
        held = queued + _JOINING.get(address, 0)
        full = size is not None and held and total + sum(_JOINING.values()) >= size - reserved(size)
        if held >= cap or full:
            return held
        _JOINING[address] = _JOINING.get(address, 0) + 1
        return 0


def reserved(size: int) -> int:
    """Places of a queue of ``size`` kept for addresses with nothing waiting or running: its last quarter."""
    return max(1, size // 4) if size > 1 else 0


def _joined(address: str) -> None:
    with _IN_FLIGHT_LOCK:
        left = _JOINING.get(address, 0) - 1
        if left > 0:
            _JOINING[address] = left
        else:
            _JOINING.pop(address, None)


def _release(address: str, size: int) -> None:
    with _IN_FLIGHT_LOCK:
        left = _IN_FLIGHT.get(address, 0) - size
        if left > 0:
            _IN_FLIGHT[address] = left
        else:
            _IN_FLIGHT.pop(address, None)


async def _answer(send, status: int, message: str) -> None:
    body = json.dumps({"detail": message, "error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


class _Stalled(Exception):
    """A request body that stopped arriving for ``BODY_IDLE_S``."""


class RequestLimits:
    """The ASGI middleware (see the module docstring)."""

    def __init__(self, app):
        self.app = app
        STREAMS.watching = True  # this server records the result streams it opens: unread work can be told

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http":
            return await self.app(scope, receive, send)
        app = scope.get("app")
        holder = getattr(app, "state_holder", None)
        if holder is not None and getattr(holder, "explorer_owners", None) is None:  # the first request
            gradio_compat.bound_sessions(holder, visitors.current, settings.sessions_per_client(), holder.capacity)
        address = visitors.of_scope(scope)
        token = visitors.CURRENT.set(address)
        try:
            await self._limited(scope, receive, send, address)
        finally:
            visitors.CURRENT.reset(token)

    async def _limited(self, scope, receive, send, address):
        path, method = scope.get("path", ""), scope.get("method", "GET")
        if len(scope.get("query_string") or b"") > PAGE_QUERY_BYTES:
            scope = {**scope, "query_string": _long_query(scope["query_string"], path)}
        upload = method == "POST" and path.rstrip("/").endswith("/upload")
        cap = upload_cap() if upload else settings.max_body()
        headers = dict(scope.get("headers") or ())
        raw = headers.get(b"content-length")
        if raw is not None and b"transfer-encoding" in headers:  # conflicting framing (request smuggling)
            return await _answer(send, 400, "Both Content-Length and Transfer-Encoding sent: refused.")
        if method == "GET" and "/gradio_api/" in path:
            STREAMS.record(path, scope.get("query_string") or b"")
        try:
            length = int(raw) if raw is not None else None
        except ValueError:
            return await _answer(send, 400, "Content-Length is not a number.")
        if length is not None and (length < 0 or length > cap):
            return await _answer(
                send,
                413,
                f"Request body of {length:,} bytes refused: at most {cap:,} bytes "
                f"{'per upload' if upload else 'per request'} on this server.",
            )
        # a body of unknown length is counted at its cap while it lasts; a bodiless request (a GET
        # stream may last minutes) at nothing
        size = length if length is not None else 0 if method in ("GET", "HEAD", "OPTIONS") else cap
        joins = method == "POST" and _joins_queue(path)
        if joins:
            app = scope.get("app")
            queued = gradio_compat.queued_events(app, visitors.of_request, address) if app is not None else 0
            waiting = gradio_compat.waiting_events(app) if app is not None else 0
            size = settings.queue_size()
            held = _join(address, queued, settings.events_per_client(), waiting, size)
            if held and held < settings.events_per_client():  # the reserve: Gradio's own queue-full answer
                return await _answer(
                    send,
                    503,
                    f"Queue is full for addresses already waiting: its last "
                    f"{reserved(size)} places are kept for other visitors; wait for "
                    f"your {held} request(s) to finish.",
                )
            if held:
                return await _answer(
                    send,
                    429,
                    f"Too many requests at once from your address ({held} waiting or "
                    "running); wait for them to finish.",
                )
        try:
            return await self._bounded(scope, receive, send, address, path, method, upload, cap, size)
        finally:
            if joins:
                _joined(address)

    async def _bounded(self, scope, receive, send, address, path, method, upload, cap, size):
        if not _reserve(address, size):
            return await _answer(send, 429, "Too many request bodies at once from your address; try again shortly.")
        if upload and not UPLOADS.begin(address, size):
            _release(address, size)
            return await _answer(
                send,
                429,
                f"Uploads refused: your address has sent {UPLOADS.used(address):,} "
                f"bytes in the last {settings.upload_ttl() / 60:.0f} minutes "
                f"(at most {CLIENT_UPLOADS * upload_cap():,}).",
            )
        try:
            if method == "POST" and _makes_sessions(path):
                try:
                    receive = await _read_whole(receive, cap)
                except _Stalled:
                    return await _answer(send, 408, f"Request body not received within {BODY_IDLE_S:.0f} s.")
                if receive is None:
                    return await _answer(send, 413, f"Request body refused: more than {cap:,} bytes.")
                if not _session_allowed(scope.get("app"), receive.body, address):
                    return await _answer(
                        send,
                        429,
                        "Too many new sessions from your address in the last minute; reload the page in a minute.",
                    )
            await self._relay(scope, receive, send, cap, upload, address, size)
        finally:
            _release(address, size)

    async def _relay(self, scope, receive, send, cap, upload, address, size):
        seen = 0
        state = {"started": False, "status": 0, "too_large": False, "held": None, "held_body": b"", "paths": b""}

        async def counted():
            nonlocal seen
            message = await receive()
            if message.get("type") == "http.request":
                seen += len(message.get("body", b""))
                if seen > cap:
                    state["too_large"] = True
                    raise _TooLarge()
            return message

        async def guarded_send(message):
            kind = message.get("type")
            if kind == "http.response.start":
                state["status"] = message.get("status", 200)
                if state["too_large"]:
                    state["started"] = True
                    return await _answer(send, 413, f"Request body refused: more than {cap:,} bytes.")
                if state["status"] >= 400:  # held until its length is known: a long one is cut
                    state["held"] = message
                    return
                state["started"] = True
                return await send(message)
            if kind == "http.response.body":
                if state["too_large"]:
                    return
                if upload and state["status"] == 200 and len(state["paths"]) < 65536:
                    state["paths"] += message.get("body", b"")
                if state["held"] is not None:
                    if len(state["held_body"]) < HELD_BYTES:  # enough to read a validation answer's fields
                        state["held_body"] += message.get("body", b"")
                    if message.get("more_body"):
                        return
                    state["started"] = True
                    return await self._error(send, state["held"], state["held_body"])
            return await send(message)

        stored = []
        try:
            await self.app(scope, counted, guarded_send)
            if upload and state["status"] == 200:
                stored = _paths(state["paths"])
        except _TooLarge:
            if not state["started"]:
                await _answer(send, 413, f"Request body refused: more than {cap:,} bytes.")
        except Exception as exc:
            if state["started"]:
                raise
            log.warning("request %s %s refused: %s", scope.get("method"), scope.get("path"), type(exc).__name__)
            await _answer(send, 400, f"Malformed request ({type(exc).__name__}); nothing was done.")
        finally:
            if upload:
                UPLOADS.end(address, size, stored)

    @staticmethod
    async def _error(send, start, body: bytes):
        """An error answer: a 500 (Gradio's answer to input its event could not take) becomes a 400, a
        validation list is told by its fields' names and messages (never the input), a long text is cut."""
        status = 400 if start.get("status") == 500 else start.get("status", 400)
        if len(body) <= ERROR_CHARS and status == start.get("status"):
            await send(start)
            return await send({"type": "http.response.body", "body": body})
        await _answer(send, status, _short(body))


def _short(body: bytes) -> str:
    try:
        content = json.loads(body)
    except ValueError:
        content = None
    if isinstance(content, dict) and isinstance(content.get("detail"), list):
        said = [
            f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', '')}"
            for e in content["detail"][:5]
            if isinstance(e, dict)
        ]
        return ("Invalid request: " + "; ".join(said))[:ERROR_CHARS]
    if isinstance(content, dict):
        text = content.get("error") or content.get("detail") or ""
    else:
        text = body.decode("utf-8", "replace")
    text = str(text)
    return text if len(text) <= ERROR_CHARS else f"{text[: ERROR_CHARS - 60]} … [{len(text):,} characters, cut]"


def _paths(body: bytes) -> list:
    """The files an upload answer names (a JSON list of paths), each inside Gradio's upload cache."""
    try:
        names = json.loads(body)
    except ValueError:
        return []
    root = os.path.realpath(gradio_compat.upload_folder())
    return (
        [n for n in names if isinstance(n, str) and os.path.realpath(n).startswith(root + os.sep)]
        if isinstance(names, list)
        else []
    )


def owns(path, request=None) -> bool:
    """Did the client of ``request`` (default: the running event's) upload ``path``?"""
    req = gradio_compat.event_request() if request is None else request
    return UPLOADS.owns(path, visitors.of_request(req))


def start_sweeper(demo) -> threading.Thread:
    """A daemon thread deleting uploads older than ``settings.upload_ttl()`` (every quarter of it, at
    most a minute); it ends when ``demo`` is gone."""
    ref = weakref.ref(demo)

    def loop():
        while ref() is not None:
            ttl = settings.upload_ttl()
            time.sleep(max(1.0, min(60.0, ttl / 4)))
            try:
                UPLOADS.sweep(ttl, gradio_compat.upload_folder())
            except Exception:
                log.exception("sweeping old uploads failed")

    thread = threading.Thread(target=loop, name="upload-sweeper", daemon=True)
    thread.start()
    return thread
