"""Which events' results someone is reading: work whose result stream is never opened is stopped.

An API client may ``POST /gradio_api/call/<name>`` and never open ``GET /gradio_api/call/<name>/<event_id>``
(nor a browser ``/queue/data?session_hash=...``): Gradio runs the event anyway, holding a slot for nobody.
``RequestLimits`` (``explorer.app.server.request_limits``) records each stream opened (``STREAMS.opened``:
the event id or the session it reads); ``gone_probe()`` -> a check for the running event: its client went
away (``gradio_compat.client_gone_probe``), or its stream was not opened within ``UNREAD_S`` seconds of
the event joining the queue. ``STREAMS`` holds ids and times, never a user's data.
"""

from __future__ import annotations

import collections
import threading
import time
from urllib.parse import parse_qs

from explorer.app.server.gradio_compat import client_gone_probe

UNREAD_S = 5.0  # a result stream not opened this long after its event joined the queue: nobody reads it
REMEMBERED = 16384  # stream openings remembered (ids are unique; the oldest are forgotten first)


class Streams:
    def __init__(self):
        self._lock = threading.Lock()
        self._seen: collections.OrderedDict = collections.OrderedDict()
        self.watching = False  # set by the middleware that records the streams (RequestLimits)

    def record(self, path: str, query: bytes) -> None:
        """A GET request: remember the event id (``.../call/<name>/<event_id>``) or the session
        (``.../queue/data?session_hash=``) whose results it streams."""
        key = None
        if path.rstrip("/").endswith("/queue/data"):
            key = (parse_qs(query.decode("latin-1")).get("session_hash") or [None])[0]
        elif "/call/" in path:
            parts = path.rstrip("/").split("/call/", 1)[1].split("/")
            key = parts[-1] if len(parts) >= 2 else None
        if key:
            with self._lock:
                self._seen[key[:128]] = time.monotonic()
                self._seen.move_to_end(key[:128])
                while len(self._seen) > REMEMBERED:
                    self._seen.popitem(last=False)

    def opened(self, event_id: str | None, session: str | None) -> bool:
        """Was the result stream of ``event_id`` (or of ``session``) opened? Always True in a server that
        records no stream (``watching`` False: a page served without ``RequestLimits``, as a benchmark's demo
        of one tab): nothing there could ever say so, and its work must not be stopped for that."""
        with self._lock:
            return not self.watching or (event_id in self._seen) or (session in self._seen)


STREAMS = Streams()


def gone_probe(unread_s: float = UNREAD_S):
    """For the running event (made in its context): True once its client went away or nobody opened its result
    stream within ``unread_s`` seconds of it joining the queue."""
    return client_gone_probe(lambda event_id, session: STREAMS.opened(event_id, session), unread_s)
