"""The app's API from ``gradio_client``: every endpoint, and a bad config (the ConfigError message
comes back as the client's error; documented choice: endpoints raise ``gr.Error(message)``)."""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from gradio_client import Client

SMALL = {"n_layers": 2, "d_model": 32, "n_heads": 2}


@pytest.fixture(scope="module")
def client(app_url):
    return Client(app_url, verbose=False)


def test_named_endpoints(client):
    api = client.view_api(return_format="dict", print_info=False)
    assert {"/analyze", "/gradients", "/benchmark"} <= set(api["named_endpoints"])


def test_analyze(client):
    s = client.predict(json.dumps({**SMALL, "attention": "sliding_window", "window": 2}), "abcdef", api_name="/analyze")
    assert s["n_tokens"] == 6 and s["n_layers"] == 2 and s["n_heads"] == 2 and s["mask_kind"] == "pattern"
    assert s["allowed_fraction"] == pytest.approx(11 / 36, abs=1e-6)  # window 2, causal: 6 + 5 pairs
    assert s["row_sums_ok"]


def test_analyze_includes_the_variant_views(client):
    s = client.predict(json.dumps({**SMALL, "attention": "linear", "ffn": "switch"}), "abcdefgh", api_name="/analyze")
    views = s["views"]
    assert set(views) == {"approximation", "experts"}
    assert sum(views["experts"]["expert_counts"][0]) == 8 and views["experts"]["top_k"] == 1
    err = views["approximation"]["max_abs_error"]
    assert len(err) == 2 and len(err[0]) == 2 and 0 < views["approximation"]["overall_max_abs_error"] <= 1
    assert client.predict(json.dumps(SMALL), "abc", api_name="/analyze")["views"] == {}


def test_gradients(client):
    g = client.predict(json.dumps({**SMALL, "norm_placement": "rezero"}), api_name="/gradients")
    assert g["layer"] == [0, 1] and g["attn_out"] == [0.0, 0.0] and g["ffn_out"] == [0.0, 0.0]
    assert all(r > 0 for r in g["residual"])


def test_benchmark(client):
    recs = client.predict(json.dumps(SMALL), "32,16", "forward", api_name="/benchmark")
    assert [r["seq_len"] for r in recs] == [16, 32]
    assert all(r["status"] == "ok" and r["ms"] > 0 and r["peak_bytes"] > 0 for r in recs)


@pytest.mark.parametrize(
    "endpoint,args,needle",
    [
        ("/analyze", ('{"attention": "fixed", "n_summary": 99}', "x"), "n_summary=99"),
        ("/gradients", ('{"n_layers": 500}',), "n_layers=500"),
        ("/gradients", ('{"not_a_field": 1}',), "not_a_field"),
        ("/benchmark", ("{}", "16,banana", "forward"), "seq_lens"),
    ],
)
def test_bad_config_returns_the_config_error(client, endpoint, args, needle):
    with pytest.raises(Exception) as info:
        client.predict(*args, api_name=endpoint)
    assert needle in str(info.value)


def test_concurrent_requests_do_not_mix(app_url):
    def ask(window):
        c = Client(app_url, verbose=False)
        cfg = {**SMALL, "attention": "sliding_window", "window": window}
        return window, c.predict(json.dumps(cfg), "abcdefgh", api_name="/analyze")["allowed_fraction"]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(ask, [1, 2, 3, 8]))
    for window, frac in results:
        allowed = sum(min(i + 1, window) for i in range(8))
        assert frac == pytest.approx(allowed / 64, abs=1e-6)


@pytest.mark.parametrize(
    "config,needle",
    [
        ('{"seed": ' + "7" * 5000 + "}", "number"),  # Python refuses > 4300 digits: a clear message
        ("[" * 3000 + "]" * 3000, "nesting"),  # not a RecursionError
    ],
)
def test_hostile_json_gets_a_clear_message(client, config, needle):
    with pytest.raises(Exception) as info:
        client.predict(config, api_name="/gradients")
    assert needle in str(info.value) and "RecursionError" not in str(info.value)
    assert "ValueError" not in str(info.value)


def _call(app_url, api_name, data):
    """Gradio's HTTP API by hand: POST the inputs, then read the event stream -> (event, data)."""
    import urllib.request

    base = app_url + f"gradio_api/call/{api_name}"
    req = urllib.request.Request(
        base, data=json.dumps({"data": data}).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        event_id = json.load(r)["event_id"]
    with urllib.request.urlopen(f"{base}/{event_id}", timeout=60) as r:
        lines = r.read().decode().splitlines()
    events = [ln.split(": ", 1)[1] for ln in lines if ln.startswith("event: ")]
    datas = [ln.split(": ", 1)[1] for ln in lines if ln.startswith("data: ")]
    return events[-1], json.loads(datas[-1]) if datas else None


def test_a_wrong_typed_input_to_a_ui_endpoint_gets_a_message(app_url):
    event, data = _call(app_url, "upload_config", [12345])
    assert event == "error" and data, "a message, not {'error': null}"


@pytest.mark.parametrize("how", ["cancel", "disconnect"])
def test_a_cancelled_benchmark_frees_the_sweep_slot_within_one_run(app_url, how):
    """job.cancel() (or a client process that dies mid-sweep) stops the sweep between two modules: the
    next benchmark, which shares the one sweep slot, starts at once instead of waiting for the sweep."""
    import subprocess
    import sys
    import time

    big = json.dumps({"n_layers": 12, "d_model": 512, "n_heads": 16, "attention": "sliding_window"})
    lengths = "256,260,264,268,272,276,280,284"  # ~1.5 s per run on a 2-core CPU: a sweep of ~40 s
    if how == "cancel":
        job = Client(app_url, verbose=False).submit(big, lengths, "forward_backward", api_name="/benchmark")
        time.sleep(2.5)
        job.cancel()
    else:  # a separate client process, killed while its sweep runs: its connections drop
        code = (
            "import sys; from gradio_client import Client; "
            "Client(sys.argv[1], verbose=False).predict(sys.argv[2], sys.argv[3], 'forward_backward', "
            "api_name='/benchmark')"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", code, app_url, big, lengths], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(6)  # connect, submit, start the sweep
        proc.kill()
        proc.wait(10)
    from gradio_client.exceptions import AppError

    t0 = time.perf_counter()
    client = Client(app_url, verbose=False)  # the same address: refused until the stopped sweep has ended
    while True:  # the stop lands between two runs of the sweep (a run takes seconds on a loaded machine)
        try:
            recs = client.predict(json.dumps(SMALL), "16", "forward", api_name="/benchmark")
            break
        except AppError as exc:
            assert "One heavy job at a time" in str(exc) and time.perf_counter() - t0 < 8, str(exc)
            time.sleep(0.25)
    waited = time.perf_counter() - t0
    print(f"{how}: the next benchmark waited {waited:.1f} s")
    assert recs[0]["status"] == "ok"
    assert waited < 8, f"the next benchmark waited {waited:.1f} s"


RUNNING = {"PROCESSING", "PROGRESS", "ITERATING"}


def _wait_status(job, codes, what, timeout_s=60):
    """Wait until ``job``'s status is one of ``codes`` (it must not end first)."""
    import time

    deadline = time.time() + timeout_s
    while job.status().code.name not in codes:
        assert not job.done(), f"{what}: the request ended first: {job.status()}"
        assert time.time() < deadline, f"{what}: {job.status()}"
        time.sleep(0.05)


def _wait_status(job, codes, what, timeout_s=60):
    """Wait until ``job``'s status is one of ``codes`` (it must not end first)."""
    import time

    deadline = time.time() + timeout_s
    while job.status().code.name not in codes:
        assert not job.done(), f"{what}: the request ended first: {job.status()}"
        assert time.time() < deadline, f"{what}: {job.status()}"
        time.sleep(0.05)


def _wait_refused(url, proc, timeout_s=90):
    """Wait until a benchmark from this address is refused as a second heavy job: the sweep of ``proc``
    (a client process of the same address) is running."""
    import time

    from gradio_client.exceptions import AppError

    client, deadline = Client(url, verbose=False), time.time() + timeout_s
    while True:
        assert proc.poll() is None, "the client process ended before its sweep was seen running"
        assert time.time() < deadline, f"no sweep seen running within {timeout_s} s"
        try:
            client.predict(json.dumps(SMALL), "16", "forward", api_name="/benchmark")
        except AppError as exc:
            if "One heavy job at a time" in str(exc):
                return
            raise
        time.sleep(0.25)


# One server for the two tests of a small queue: one compute slot and room for one waiting event; the
# per-request compute budget (predicted from this machine's measured rate, so lower on a loaded machine) and
# the visitor share must not refuse the big requests before they queue; each client may name its address
# as a proxy would (one heavy job per client address). Each test leaves it idle (its requests ended).
SMALL_QUEUE = {
    "EXPLORER_QUEUE_SIZE": "1",
    "EXPLORER_COMPUTE_SLOTS": "1",
    "EXPLORER_REQUEST_SECONDS": "100000",
    "EXPLORER_VISITOR_SHARE": "1000000",
    "EXPLORER_CLIENT_ADDRESS": "forwarded-first",
}


@pytest.fixture(scope="module")
def small_queue(serve_app):
    with serve_app(SMALL_QUEUE, "app-server-queue.log") as url:
        yield url


def _ended(jobs, timeout_s=180):
    """Cancel ``jobs`` and wait until each has ended: the server is left idle for the next test."""
    import time

    for j in jobs:
        try:
            j.cancel()
        except Exception:  # noqa: BLE001 - a cancel request that times out: the wait below still bounds it
            pass
    deadline = time.time() + timeout_s
    while not all(j.done() for j in jobs) and time.time() < deadline:
        time.sleep(0.1)


def test_a_full_queue_answers_busy(small_queue):
    """With one compute slot and room for one waiting event, a third interactive request is refused at
    once with the queue-full status (the browser shows "This application is currently busy"), not left
    hanging.

    The requests are submitted one after the other: Gradio counts only events that have not started,
    so two joins that reach the server before the first one starts would already fill the queue."""

    def big(seed):  # gradient norms of 12 layers of width 512: seconds of work on a 2-core CPU
        return json.dumps({"n_layers": 12, "d_model": 512, "n_heads": 16, "d_ff": 4096, "seed": seed})

    clients = [Client(small_queue, verbose=False) for _ in range(3)]
    jobs = []
    try:
        jobs.append(clients[0].submit(big(1), api_name="/gradients"))
        _wait_status(jobs[0], RUNNING, "the first request starts", 30)
        jobs.append(clients[1].submit(big(2), api_name="/gradients"))
        _wait_status(jobs[1], {"IN_QUEUE"}, "the second request waits", 30)  # one runs, one waits: full
        with pytest.raises(Exception, match="(?i)queue is full"):
            clients[2].predict(big(3), api_name="/gradients")
        assert not jobs[0].done() and not jobs[1].done(), "the refusal came while both requests were held"
    finally:
        _ended(jobs)


def test_heavy_jobs_never_take_the_queue(small_queue):
    """Sweeps are heavy jobs: with room for one waiting event, two sweeps (one running, one waiting for
    the sweep slot) leave the queue empty, and interactive requests go on being answered."""
    big = json.dumps({"n_layers": 12, "d_model": 512, "n_heads": 16})
    lengths = "256,260,264,268,272,276,280,284"  # a sweep of tens of seconds on a 2-core CPU
    # three visitors (one heavy job per client address): each names its address as a proxy would
    clients = [Client(small_queue, verbose=False, headers={"X-Forwarded-For": f"10.0.0.{i + 1}"}) for i in range(3)]
    jobs = [clients[0].submit(big, lengths, "forward_backward", api_name="/benchmark")]
    try:
        _wait_status(jobs[0], RUNNING, "the first sweep starts")
        jobs.append(clients[1].submit(big, lengths, "forward_backward", api_name="/benchmark"))
        _wait_status(jobs[1], RUNNING, "the second sweep is taken in (it waits for the slot, not in the queue)")
        assert not jobs[0].done() and not jobs[1].done()
        for n in range(3):
            assert clients[2].predict(json.dumps({"seed": n}), "abc", api_name="/analyze")["n_tokens"] == 3
    finally:
        _ended(jobs)
