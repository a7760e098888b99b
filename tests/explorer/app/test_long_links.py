"""A share link over 64 KB (past what Gradio's root-url code accepts: it answered a bare HTTP 500) is
refused like any over-long link: behind ``RequestLimits`` the page route gets no query string and an
event gets only the query's length, which the link reader refuses with its usual notice."""

import asyncio
import json
from types import SimpleNamespace
from urllib.parse import parse_qsl, quote

import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from starlette.routing import Route

from explorer.app.controls.share import from_query
from explorer.app.server import request_limits


def _call(method: str, path: str, query: str) -> tuple:
    """One request straight through the ASGI middleware (an HTTP client refuses a URL over 64 KB before
    sending it) -> (status, the query string the route saw)."""

    async def seen(request):
        httpx.URL(str(request.url))  # what Gradio's root-url code does: refuses a URL over 64 KB
        return JSONResponse({"query": request.scope["query_string"].decode()})

    app = Starlette(
        routes=[Route("/", seen), Route("/gradio_api/queue/join", seen, methods=["POST"])],
        middleware=[Middleware(request_limits.RequestLimits)],
    )
    app.state_holder = SimpleNamespace(session_data={}, explorer_owners={})
    app.get_blocks = lambda: SimpleNamespace(_queue=SimpleNamespace(event_ids_to_events={}))
    body = b'{"session_hash": "s"}' if method == "POST" else b""
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "scheme": "http",
        "query_string": query.encode(),
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 5000),
        "http_version": "1.1",
        "app": app,
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-length", str(len(body)).encode()),
            (b"content-type", b"application/json"),
        ],
    }
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    payload = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, (json.loads(payload).get("query") if status == 200 else payload.decode())


def test_a_link_over_64_kb_loads_the_page_and_gets_the_long_link_notice():
    query = "seed=3&text=" + quote("é" * 12_000)  # 72 KB of percent-escapes
    assert len(query) > 65_536
    assert _call("GET", "/", query) == (200, "")
    status, sent = _call("POST", "/gradio_api/queue/join", query)
    assert status == 200 and sent == f"__link_chars={len(query)}"
    cfg, text, _, notice = from_query(dict(parse_qsl(sent)))
    _, _, _, notice_40k = from_query(dict(parse_qsl("text=" + "a" * 40_000)))
    assert notice.split("(")[0] == notice_40k.split("(")[0] == "The link could not be used "
    assert f"'{len(query)} characters'" in notice and "a query string of at most 4000 characters" in notice
    assert notice.endswith("showing the defaults.")
    assert from_query({"__link_chars": "12"}) == from_query({})  # a short length stands for nothing


def test_a_short_link_reaches_gradio_whole():
    query = "attention=sliding_window&window=32&text=" + "a" * 3000
    assert _call("GET", "/", query) == (200, query)
    assert _call("POST", "/gradio_api/queue/join", query) == (200, query)
