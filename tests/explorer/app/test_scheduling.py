"""The queue's fair order and the patient start-up check (``explorer.app.server.scheduling``,
``gradio_compat.fair_queue`` / ``patient_self_check``) and the stop of work nobody reads
(``explorer.app.server.streams``), on stand-ins for Gradio's queue: deterministic, no sleeps."""

import socket
import threading
from types import SimpleNamespace

import gradio.networking as networking

from explorer.app.server import gradio_compat, scheduling, streams
from explorer.runtime import fair, settings


def _event(address, cid="compute", batch=False):
    request = SimpleNamespace(client=SimpleNamespace(host=address), headers={})
    return SimpleNamespace(request=request, concurrency_id=cid, fn=SimpleNamespace(batch=batch), _id=address)


def test_the_fair_queue_starts_a_fifth_visitors_event_before_the_attackers_queues(monkeypatch):
    monkeypatch.delenv(settings.CLIENT_ADDRESS, raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.setattr(fair, "LEDGER", fair.Ledger(window_s=600))
    for i in range(4):
        fair.LEDGER.add(f"127.0.0.{i + 2}", 1000.0)  # the attackers used far past their share
    waiting = [_event(f"127.0.0.{i + 2}") for i in range(4) for _ in range(8)] + [_event("127.0.0.9")]
    running = [[_event("127.0.0.2")], [_event("127.0.0.3")], None, None, None, None, None, None]
    queue = SimpleNamespace(
        event_queue_per_concurrency_id={"compute": SimpleNamespace(queue=waiting, concurrency_limit=2)},
        active_jobs=running,
        get_events=lambda: "gradio's own",
    )
    scheduling.install_queue(queue)
    events, batch, cid = queue.get_events()
    assert events[0].request.client.host == "127.0.0.9" and cid == "compute" and batch is False
    assert queue.get_events() is None  # the attackers wait for the two slots they hold
    scheduling.install_queue(queue)  # idempotent
    assert queue.explorer_fair


def test_unread_and_abandoned_events_read_as_gone(monkeypatch):
    """An event whose result stream nobody opened within ``UNREAD_S`` of joining, or whose client left."""
    from gradio.context import LocalContext

    clock = {"now": 100.0}
    monkeypatch.setattr(gradio_compat.time, "monotonic", lambda: clock["now"])
    job = SimpleNamespace(_id="evt1", session_hash="sess1", alive=True, enqueue_time=100.0)
    blocks = SimpleNamespace(_queue=SimpleNamespace(active_jobs=[[job]]))
    t1, t2 = LocalContext.blocks.set(blocks), LocalContext.event_id.set("evt1")
    try:
        registry = streams.Streams()
        monkeypatch.setattr(streams, "STREAMS", registry)
        gone = streams.gone_probe(unread_s=5.0)
        assert not gone()
        clock["now"] = 106.0
        assert not gone()  # a server that records no stream (no RequestLimits) never calls its work unread
        registry.watching = True
        assert gone()  # nobody opened its stream
        registry.record("/gradio_api/call/long_context/evt1", b"")
        assert not gone()
        job.alive = False  # the stream closed
        assert gone()
        other = SimpleNamespace(_id="evt2", session_hash="sess2", alive=True, enqueue_time=100.0)
        blocks._queue.active_jobs = [[other]]
        LocalContext.event_id.set("evt2")
        registry.record("/gradio_api/queue/data", b"session_hash=sess2")
        assert not streams.gone_probe(unread_s=5.0)()  # a browser's session stream is open
    finally:
        LocalContext.blocks.reset(t1)
        LocalContext.event_id.reset(t2)


def test_the_self_check_counts_a_busy_server_as_serving(monkeypatch):
    # restored after the test; a plain check first, so the patient one is installed here with short waits even
    # when building the app in this process installed it already (its 60 s wait on the closed port below)
    monkeypatch.setattr(networking, "url_ok", lambda url: False)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    accepted = []
    threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True).start()
    try:
        gradio_compat.patient_self_check(wait_s=2.0, read_s=0.3)
        assert networking.url_ok.explorer_patient
        assert networking.url_ok(f"http://127.0.0.1:{port}/")  # accepted, never answered: busy, not gone
    finally:
        for conn, _ in accepted:
            conn.close()
        listener.close()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    free = closed.getsockname()[1]
    closed.close()
    assert not networking.url_ok(f"http://127.0.0.1:{free}/")  # nothing listening: still a failure


def test_a_visitor_alone_keeps_full_priority_and_yields_only_beside_others(monkeypatch):
    from explorer.app.server import calls

    queue = []
    monkeypatch.setattr(calls, "others_in_queue", lambda address_of, address: any(a != address for a in queue))
    assert not calls.yielding_helps("10.0.0.1")  # an empty queue: nobody to yield to
    queue.append("10.0.0.1")
    assert not calls.yielding_helps("10.0.0.1")  # only its own events
    queue.append("10.0.0.2")
    assert calls.yielding_helps("10.0.0.1") and not calls.yielding_helps(None)
