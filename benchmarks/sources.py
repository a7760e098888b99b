"""Clients from several loopback addresses: each simulated visitor's connections leave from its own address.

An app that names visitors by their connection's address (``EXPLORER_CLIENT_ADDRESS=socket``, the default) sees
every benchmark client as one visitor unless they connect from different addresses; a header such as
``X-Forwarded-For`` is no longer trusted. Linux routes all of 127.0.0.0/8 to loopback, so a client can bind any
of those addresses as its source.

``install()`` makes every ``httpx`` request carrying the header ``SOURCE_HEADER`` leave from that address (the
header itself is not sent): ``gradio_client.Client(url, headers=headers(ip))`` then sends all its requests,
its streams included, from ``ip``. ``address(i)`` -> the i-th visitor's address (127.0.0.2 upwards, skipping
127.0.0.1).
"""

from __future__ import annotations

import threading

import httpx

SOURCE_HEADER = "x-bench-source"
_LOCK = threading.Lock()
_SYNC: dict = {}
_ASYNC: dict = {}


def address(i: int) -> str:
    """The i-th visitor's loopback address: 127.0.0.2, 127.0.0.3, ... (at most 65000 of them)."""
    n = 2 + i
    return f"127.0.{n // 254}.{n % 254 + 1}" if n >= 254 else f"127.0.0.{n}"


def headers(ip: str) -> dict:
    return {SOURCE_HEADER: ip}


def _pick(request, table: dict, make):
    ip = request.headers.get(SOURCE_HEADER)
    if ip is None:
        return None
    del request.headers[SOURCE_HEADER]
    with _LOCK:
        if ip not in table:
            table[ip] = make(local_address=ip)
        return table[ip]


def install() -> None:
    """Route requests carrying ``SOURCE_HEADER`` through a transport bound to that address (idempotent)."""
    if getattr(httpx.HTTPTransport.handle_request, "bench_sources", False):
        return
    sync_handle, async_handle = httpx.HTTPTransport.handle_request, httpx.AsyncHTTPTransport.handle_async_request

    def handle_request(self, request):
        bound = _pick(request, _SYNC, httpx.HTTPTransport)
        return sync_handle(bound if bound is not None else self, request)

    async def handle_async_request(self, request):
        bound = _pick(request, _ASYNC, httpx.AsyncHTTPTransport)
        return await async_handle(bound if bound is not None else self, request)

    handle_request.bench_sources = True
    httpx.HTTPTransport.handle_request = handle_request
    httpx.AsyncHTTPTransport.handle_async_request = handle_async_request
