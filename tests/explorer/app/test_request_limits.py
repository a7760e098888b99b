"""Request bodies, uploads and queue places bounded per request and per client address
(``explorer.app.server.request_limits``), on a small Starlette app standing in for Gradio's routes: what is
refused is refused before the app reads it, errors never quote the input whole, and the upload sweep
deletes only the upload route's own files, only inside the upload cache."""

import json
import os
import time
from types import SimpleNamespace

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from explorer.app.server import request_limits, visitors
from explorer.runtime import settings


@pytest.fixture
def served(tmp_path, monkeypatch):
    """-> (client, calls, root): a TestClient of the app behind ``RequestLimits``, what its routes saw,
    and its upload cache."""
    root = tmp_path / "uploads"
    root.mkdir()
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(root))
    monkeypatch.setenv(settings.CLIENT_ADDRESS, "forwarded-first")
    monkeypatch.setattr(request_limits, "UPLOADS", request_limits.Uploads())
    calls = []

    async def join(request):
        body = await request.body()
        calls.append(("join", len(body), visitors.current(), body[:20]))
        return JSONResponse({"event_id": "e"})

    async def upload(request):
        body = await request.body()
        folder = root / f"{len(calls):040d}"
        folder.mkdir()
        (folder / "f.bin").write_bytes(body)
        calls.append(("upload", len(body), visitors.current()))
        return JSONResponse([str(folder / "f.bin"), "/etc/passwd"])  # a path outside is never recorded

    async def broken(request):
        raise KeyError("fn_index")

    async def invalid(request):
        detail = [
            {
                "type": "string_type",
                "loc": ["body", "session_hash"],
                "msg": "Input should be a valid string",
                "input": ["x" * 100_000],
            }
        ]
        return JSONResponse({"detail": detail}, status_code=422)

    async def failed(request):
        return JSONResponse({"error": "Value: " + "y" * 50_000 + " is not in the list of choices"}, status_code=500)

    app = Starlette(
        routes=[
            Route("/gradio_api/queue/join", join, methods=["POST"]),
            Route("/gradio_api/upload", upload, methods=["POST"]),
            Route("/gradio_api/broken", broken, methods=["POST"]),
            Route("/gradio_api/invalid", invalid, methods=["POST"]),
            Route("/gradio_api/run/failed", failed, methods=["POST"]),
        ],
        middleware=[Middleware(request_limits.RequestLimits)],
    )
    app.queued = []
    app.state_holder = SimpleNamespace(session_data={"known": object()}, explorer_owners={})

    class Queue:  # Gradio's: its events by id (waiting or running), its length the waiting ones (here: all)
        @property
        def event_ids_to_events(self):
            return dict(enumerate(app.queued))

        def __len__(self):
            return len(app.queued)

    app.get_blocks = lambda: SimpleNamespace(_queue=Queue())
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, calls, root, app


def test_a_body_over_its_cap_is_refused_unread(served, monkeypatch):
    client, calls, _, _ = served
    monkeypatch.setenv(settings.MAX_BODY, "1k")
    r = client.post("/gradio_api/queue/join", content=b"x" * 2000)
    assert r.status_code == 413 and "at most 1,024 bytes" in r.json()["detail"] and calls == []
    chunks = (b"x" * 512 for _ in range(4))  # no length: counted as it comes and cut at the cap
    r = client.post("/gradio_api/queue/join", content=chunks)
    assert r.status_code == 413 and calls == []
    r = client.post("/gradio_api/queue/join", content=b"x" * 1000, headers={"X-Forwarded-For": "10.0.0.1"})
    assert r.status_code == 200 and calls == [("join", 1000, "10.0.0.1", b"x" * 20)]  # the route sees the visitor


def test_an_address_holds_a_bounded_number_of_queue_places(served, monkeypatch):
    client, calls, _, app = served
    monkeypatch.setenv(settings.EVENTS_PER_CLIENT, "3")
    mine = SimpleNamespace(client=SimpleNamespace(host="testclient"), headers={"x-forwarded-for": "10.0.0.1"})
    other = SimpleNamespace(client=SimpleNamespace(host="testclient"), headers={"x-forwarded-for": "10.0.0.2"})
    app.queued[:] = [SimpleNamespace(request=mine)] * 3 + [SimpleNamespace(request=other)] * 5
    r = client.post("/gradio_api/queue/join", json={}, headers={"X-Forwarded-For": "10.0.0.1"})
    assert r.status_code == 429 and "3 waiting or running" in r.json()["detail"] and calls == []
    r = client.post("/gradio_api/queue/join", json={}, headers={"X-Forwarded-For": "10.0.0.3"})
    assert r.status_code == 200  # another address is not held back by the first one's events


def test_a_route_exception_is_a_short_400_and_errors_never_quote_the_input(served):
    client, *_ = served
    r = client.post("/gradio_api/broken", json={})
    assert r.status_code == 400 and r.json()["detail"] == "Malformed request (KeyError); nothing was done."
    r = client.post("/gradio_api/invalid", json={})
    assert r.status_code == 422 and len(r.content) < 2 * request_limits.ERROR_CHARS + 100
    assert "body.session_hash: Input should be a valid string" in r.json()["detail"] and "xxxx" not in r.text
    r = client.post("/gradio_api/run/failed", json={})
    assert r.status_code == 400 and len(r.json()["error"]) <= request_limits.ERROR_CHARS
    assert r.json()["error"].startswith("Value: yyy")


def test_uploads_are_counted_per_address_and_swept_inside_the_cache_only(served, tmp_path):
    client, calls, root, _ = served
    r = client.post("/gradio_api/upload", content=b"u" * 300, headers={"X-Forwarded-For": "10.0.0.5"})
    assert r.status_code == 200
    stored = r.json()[0]
    uploads = request_limits.UPLOADS
    assert uploads.owns(stored, "10.0.0.5") and not uploads.owns(stored, "10.0.0.6")
    assert not uploads.known("/etc/passwd") and uploads.used("10.0.0.5") >= 150
    outside = tmp_path / "outside.txt"
    outside.write_text("not the app's")
    inside_link = root / ("l" * 40)
    inside_link.mkdir()
    os.symlink(outside, inside_link / "f.bin")
    uploads.end("10.0.0.5", 0, [str(outside), str(inside_link / "f.bin")])  # as if they had been recorded
    assert uploads.sweep(300, str(root), now=time.time() + 10) == 0  # nothing is old yet
    assert uploads.sweep(300, str(root), now=time.time() + 301) == 1
    assert not os.path.exists(stored) and not os.path.exists(os.path.dirname(stored))
    assert outside.read_text() == "not the app's" and os.path.islink(inside_link / "f.bin")


def test_each_address_has_its_own_upload_allowance(monkeypatch):
    monkeypatch.setenv("EXPLORER_UPLOAD_CHECKPOINT_BYTES", "1M")
    uploads, cap = request_limits.Uploads(), request_limits.upload_cap()
    assert cap == 2 << 20
    for _ in range(request_limits.CLIENT_UPLOADS):
        assert uploads.begin("10.0.0.1", cap)
    assert not uploads.begin("10.0.0.1", cap) and uploads.begin("10.0.0.2", cap)
    uploads.end("10.0.0.1", cap, [])  # a refused or failed upload gives its reservation back
    assert uploads.begin("10.0.0.1", cap)


def test_the_upload_route_refuses_an_address_past_its_allowance(served, monkeypatch):
    client, calls, *_ = served
    monkeypatch.setattr(request_limits, "CLIENT_UPLOADS", 0)
    r = client.post("/gradio_api/upload", content=b"u" * 10, headers={"X-Forwarded-For": "10.0.0.7"})
    assert r.status_code == 429 and calls == []


def test_new_sessions_per_address_are_rated_before_gradio_builds_them(served, monkeypatch):
    client, calls, _, _ = served
    monkeypatch.setenv(settings.NEW_SESSIONS, "5")
    monkeypatch.setattr(visitors, "NEW_SESSIONS", visitors.Rate(settings.new_sessions_per_minute))

    def join(session, ip):
        body = json.dumps({"data": ["z" * 3000], "session_hash": session})
        return client.post("/gradio_api/queue/join", content=body, headers={"X-Forwarded-For": ip}).status_code

    assert [join(f"new{i}", "10.0.0.1") for i in range(7)] == [200] * 5 + [429] * 2
    assert join("known", "10.0.0.1") == 200  # a session the server holds is never rated
    assert join("new99", "10.0.0.2") == 200  # nor is another address
    sizes = [len(json.dumps({"data": ["z" * 3000], "session_hash": s})) for s in ("new0",) * 5 + ("known", "new99")]
    assert [c[1] for c in calls] == sizes  # the body read for the check reaches the route whole


def test_the_rate_forgets_after_a_minute():
    rate = visitors.Rate(lambda: 2)
    assert rate.allow("a", now=0) and rate.allow("a", now=1) and not rate.allow("a", now=2)
    assert rate.allow("a", now=60.5) and not rate.allow("a", now=60.8)  # the first one is a minute old


def test_the_queue_keeps_its_last_quarter_for_newcomers(served, monkeypatch):
    """Addresses that already hold places stop at the reserve: a newcomer never reads "Queue is full" because
    a few other addresses filled the queue."""
    client, calls, _, app = served
    monkeypatch.setenv(settings.QUEUE_SIZE, "16")
    monkeypatch.setenv(settings.EVENTS_PER_CLIENT, "8")
    attackers = [
        SimpleNamespace(client=SimpleNamespace(host="testclient"), headers={"x-forwarded-for": f"10.0.1.{i}"})
        for i in range(3)
    ]
    app.queued[:] = [SimpleNamespace(request=a) for a in attackers for _ in range(4)]  # 12 of 16: the reserve is 4
    r = client.post("/gradio_api/queue/join", json={}, headers={"X-Forwarded-For": "10.0.1.0"})
    assert r.status_code == 503 and "kept for other visitors" in r.json()["detail"]
    r = client.post("/gradio_api/queue/join", json={}, headers={"X-Forwarded-For": "10.0.9.9"})
    assert r.status_code == 200 and calls[-1][2] == "10.0.9.9"
    assert request_limits.reserved(64) == 16 and request_limits.reserved(1) == 0


def test_conflicting_framing_is_refused(served):
    client, calls, _, _ = served
    r = client.post(
        "/gradio_api/queue/join", content=b"{}", headers={"Content-Length": "2", "Transfer-Encoding": "chunked"}
    )
    assert r.status_code == 400 and "Transfer-Encoding" in r.json()["detail"] and calls == []
