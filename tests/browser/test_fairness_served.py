"""Work nobody waits for stops, and a busy start does not exit, on a served app (``python app.py``).

- A long-context job posted through ``/gradio_api/call/long_context`` whose result stream is never opened, and
  one whose stream is opened and closed, give their only slot back: another visitor's long-context request
  (from another loopback address) is admitted and answered instead of "busy" (before: the unread job ran to its
  end, ~95 s, holding the slot).
- The app started while requests arrive from several addresses and two processes keep the cores busy comes
  up and keeps serving (before: ``launch()``'s 3 s self-check could time out and exit the process).

Every client binds its own 127.0.0.x source address; every loop has a deadline and waits on a condition.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
LONG = ["", "16384", "heldout", "", "window", "bundled", 8]
SHORT = ["", "1024", "heldout", "", "window", "bundled", 8]


def client(ip: str, timeout: float = 120.0) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=ip), timeout=timeout)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def post(c: httpx.Client, url: str, data: list) -> str:
    r = c.post(f"{url}gradio_api/call/long_context", json={"data": data})
    assert r.status_code == 200, r.text[:300]
    return r.json()["event_id"]


def result(c: httpx.Client, url: str, event_id: str) -> tuple:
    """-> (event, data line) of the call's result stream."""
    said = ""
    with c.stream("GET", f"{url}gradio_api/call/long_context/{event_id}") as stream:
        for line in stream.iter_lines():
            if line.startswith("event:"):
                said = line.split(":", 1)[1].strip()
            elif said in ("complete", "error") and line.startswith("data:"):
                return said, line[5:]
    return said, ""


def another_visitor_is_served(url: str, deadline_s: float) -> float:
    """Seconds until a short long-context request from 127.0.0.3 completes (a "busy" answer is retried)."""
    t0 = time.monotonic()
    with client("127.0.0.3") as c:
        while time.monotonic() - t0 < deadline_s:
            said, data = result(c, url, post(c, url, SHORT))
            if said == "complete":
                return time.monotonic() - t0
            assert "busy" in data.lower(), data[:300]
    pytest.fail(f"another visitor's long-context request was not served within {deadline_s} s")


@pytest.fixture(scope="module")
def server(serve_app):
    info = {}
    with serve_app({}, "app-server-fairness.log", info=info) as url:
        yield url, info["pid"]


def started(pid: int, before: float, deadline_s: float = 60.0) -> None:
    """Wait until the server spent a second of CPU since ``before`` (the posted job is running)."""
    t0 = time.monotonic()
    while cpu_seconds(pid) - before < 1.0:
        assert time.monotonic() - t0 < deadline_s, "the posted job never started"
        time.sleep(0.1)


def test_an_unread_job_gives_its_slot_back(server):
    url, pid = server
    before = cpu_seconds(pid)
    with client("127.0.0.2") as c:
        post(c, url, LONG)  # its result stream is never opened
    started(pid, before)
    assert another_visitor_is_served(url, 90.0) < 90.0


def test_an_abandoned_job_gives_its_slot_back(server):
    url, pid = server
    before = cpu_seconds(pid)
    with client("127.0.0.4") as c:
        event_id = post(c, url, LONG)
        with c.stream("GET", f"{url}gradio_api/call/long_context/{event_id}"):
            started(pid, before)  # the stream is open while the job runs, then closed
    assert another_visitor_is_served(url, 90.0) < 90.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_busy_start_keeps_serving(tmp_path):
    """Two processes keep the cores busy and four addresses send requests from the first moment; the server
    must come up, answer, and still be running."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}/"
    env = {
        **os.environ,
        "GRADIO_SERVER_NAME": "127.0.0.1",
        "GRADIO_SERVER_PORT": str(port),
        "PYTHONUNBUFFERED": "1",
        "GRADIO_TEMP_DIR": str(tmp_path),
    }
    burn = "import time\nend = time.time() + 150\nwhile time.time() < end: pass\n"
    burners = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(2)]
    log = tempfile.NamedTemporaryFile("w+", prefix="explorer-busy-start-", suffix=".log")
    proc = subprocess.Popen(
        [sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    done = threading.Event()
    answered = []

    def hammer(ip):
        with client(ip, timeout=5) as c:
            while not done.is_set():
                try:
                    r = c.post(f"{url}gradio_api/call/analyze", json={"data": ["{}", f"busy {ip}", "|", "bundled"]})
                    answered.append(r.status_code)
                    c.get(url)
                except httpx.HTTPError:
                    done.wait(0.05)

    threads = [threading.Thread(target=hammer, args=(f"127.0.0.{i}",), daemon=True) for i in range(2, 6)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the app exited while starting:\n" + Path(log.name).read_text()[-2000:]
            if answered and any(code == 200 for code in answered):
                break
            time.sleep(0.2)
        else:
            pytest.fail("the app never answered while starting busy")
        with client("127.0.0.9", timeout=60) as c:
            assert c.get(url + "config").status_code == 200
        assert proc.poll() is None
        assert "shareable link must be created" not in Path(log.name).read_text()
    finally:
        done.set()
        for t in threads:
            t.join(timeout=10)
        for b in burners:
            b.kill()
            b.wait()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
