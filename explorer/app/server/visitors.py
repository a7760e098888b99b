"""Who a request comes from: one client address per visitor, read one way for every per-visitor limit.

Gradio's sessions are free to make (any request may carry a fresh ``session_hash``), so a limit counted
per session limits nothing. The per-visitor limits (sessions kept, events queued, heavy jobs, request
bodies and uploads) count per client address instead:

- ``socket``: the connection's peer address, where the app faces its visitors directly;
- ``N`` (a number): the N-th entry of ``X-Forwarded-For`` from the right, the address the outermost of N
  trusted proxies saw: what a client writes into the header itself sits left of it and is never read;
- ``space`` (the default where ``SPACE_ID`` is set): ``1``, the entry a Space's proxy appends, read only when
  the connection comes from a private network (where that proxy connects from); a connection from anywhere
  else (loopback: a process on the host itself; a public address) is named by its peer, so a header a
  client sends straight to the app is never read;
- ``forwarded-first``: the first entry, which any client can write: only behind a proxy that overwrites
  the header (tests use it to play many visitors from one host).

``settings.client_address_mode()`` (``EXPLORER_CLIENT_ADDRESS``) chooses. An IPv6 address counts as its
/64 network (one host is commonly handed a whole /64, so single addresses are free to make); a value
that is no address falls back to the peer's. ``CURRENT`` holds the address of the HTTP request being
handled (set by ``explorer.app.server.request_limits``), which Gradio's session store reads when a request
creates a session; ``NEW_SESSIONS`` bounds how many new sessions an address may make per minute.
"""

from __future__ import annotations

import collections
import contextvars
import ipaddress
import threading
import time

from explorer.runtime import settings

UNKNOWN = "unknown"
CURRENT: contextvars.ContextVar = contextvars.ContextVar("explorer_client_address", default=None)


def normalise(text) -> str | None:
    """An address as a visitor's key: IPv4 as is (also when mapped into IPv6), IPv6 as its /64 network;
    None when ``text`` is no IP address."""
    try:
        ip = ipaddress.ip_address(str(text).strip().strip("[]"))
    except ValueError:
        return None
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def _from_proxy(peer) -> bool:
    """Is ``peer`` where a Space's proxy connects from: a private address that is not loopback?"""
    try:
        ip = ipaddress.ip_address(str(peer).strip().strip("[]"))
    except ValueError:
        return False
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_private and not ip.is_loopback


def address(peer, forwarded: str | None) -> str:
    """The visitor's address from the connection's ``peer`` and the ``X-Forwarded-For`` header."""
    mode = settings.client_address_mode()
    if mode == "space":
        mode = 1 if _from_proxy(peer) else "socket"
    if mode != "socket" and forwarded:
        hops = [h.strip() for h in str(forwarded).split(",") if h.strip()]
        if hops:
            pick = hops[0] if mode == "forwarded-first" or len(hops) < mode else hops[-mode]
            found = normalise(pick)
            if found is not None:
                return found
    if peer is None:
        return UNKNOWN
    return normalise(peer) or str(peer)[:64]


def of_scope(scope) -> str:
    """The address of an ASGI request (its ``client`` and its ``X-Forwarded-For`` headers, joined)."""
    client = scope.get("client") or (None,)
    forwarded = ",".join(v.decode("latin-1") for k, v in scope.get("headers") or () if k == b"x-forwarded-for")
    return address(client[0], forwarded or None)


def of_request(request) -> str | None:
    """The address of a ``gr.Request`` or a Starlette request; None without one (a direct call)."""
    if request is None:
        return None
    try:
        client = request.client
        headers = request.headers
        return address(getattr(client, "host", None), headers.get("x-forwarded-for"))
    except Exception:
        return None


def current() -> str:
    """The address of the request being handled in this context (``UNKNOWN`` outside one)."""
    return CURRENT.get() or UNKNOWN


class Rate:
    """At most ``per_minute()`` new things per address in any 60 s (for new sessions: each costs Gradio a
    copy of the page's config, ~0.1 s of a core, so a flood of them is refused before Gradio makes them)."""

    def __init__(self, per_minute):
        self.per_minute = per_minute
        self._lock = threading.Lock()
        self._seen: dict = {}  # address -> deque of times, at most per_minute() long

    def allow(self, address: str, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        with self._lock:
            times = self._seen.setdefault(address, collections.deque())
            while times and times[0] <= now - 60:
                times.popleft()
            if len(times) >= self.per_minute():
                return False
            times.append(now)
            if len(self._seen) > 4096:  # forget the addresses quiet for a minute
                for a in [a for a, t in self._seen.items() if not t or t[-1] <= now - 60]:
                    del self._seen[a]
            return True


NEW_SESSIONS = Rate(settings.new_sessions_per_minute)
