"""How the app feels to a viewer who is not on localhost: bytes and time of a redraw in a real Chromium.

``python -m benchmarks.netcheck [--url URL] [--mbit 10] [--latency-ms 40] [--runs 3] [--first 3]`` starts
``python app.py`` on 127.0.0.1 (unless ``--url`` names a running one), opens the page in Debian's
Chromium through Playwright, throttles the link with the DevTools protocol
(``Network.emulateNetworkConditions``: a 10 Mbit/s, 40 ms link by default) and prints a table:

- first paint: bytes the page downloads until the attention grid is drawn, and the time it takes, in
  ``--first`` fresh browser contexts (no cache, no compiled code: a new visitor each) and their median;
- redraw: after a dropdown change (the attention pattern, alternating between two values), the
  time from the click on the option (the page's own ``pointerdown``, read with ``performance.now()``)
  until the first animation frame that finds the grid of the new pattern drawn in the page, the bytes
  received by then, and the bytes of the whole redraw once the follow-up events are done, by kind:
  Gradio's event stream (every event's outputs), the page document (Chromium fetches it again after
  the share link rewrites the URL with ``history.replaceState``), other requests. The "harness"
  column is the same redraw timed from Python, which adds Playwright's own checks before it clicks
  (typically 0.2-0.5 s on a loaded page) and its polling after the draw.

Bytes: the page document and other requests as sent on the wire (compressed; the DevTools
protocol's ``Network.loadingFinished.encodedDataLength``), Gradio's event stream as the page reads it
(uncompressed; Gradio does not compress it). Timings depend on the machine's load: the script says
so when the server took long to compute the same request. It stops its own server when done.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from explorer.analysis import attention_maps
from explorer.figures.attention import attention_grid
from kernels.tools.busy import BusyWatch

ROOT = Path(__file__).resolve().parent.parent
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TITLE_JS = """(word) => { const e = document.querySelector('#attention-grid .js-plotly-plot');
  return !!(e && e.layout && e.layout.title && String(e.layout.title.text || e.layout.title).includes(word)); }"""
# Before a click: note the page's time of the next pointerdown, and of the first animation frame in
# which the grid whose title names ``word`` (the new pattern) is in the page, drawn. Gradio 6's Plot
# component mounts a new graph div for every new figure (a keyed block around Plotly's ``react``),
# so a listener on the old div never hears the new draw: each frame looks the grid up again.
ARM_JS = """(word) => { const t = window.__redraw = {down: 0, drawn: 0};
  document.addEventListener('pointerdown', () => { t.down = t.down || performance.now(); }, {capture: true, once: true});
  const tick = (now) => { const e = document.querySelector('#attention-grid .js-plotly-plot');
    const title = e && e.layout && e.layout.title;
    if (title && String(title.text || title).includes(word) && e.querySelector('.main-svg .heatmaplayer')) {
      t.drawn = performance.now(); return; }
    requestAnimationFrame(tick); };
  requestAnimationFrame(tick); }"""  # noqa: E501 (JavaScript kept verbatim)
DRAWN_JS = "() => { const t = window.__redraw; return t && t.down && t.drawn ? (t.drawn - t.down) / 1000 : null; }"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def start_server(
    port: int, log_path: str | None = None, extra_env: dict | None = None, limit_as: int | None = None
) -> subprocess.Popen:
    """``python app.py`` on 127.0.0.1:``port`` in its own process group; returns once it answers.
    ``limit_as``: an address-space limit in bytes (``RLIMIT_AS``, as ``prlimit --as``), standing in
    for the memory of a small host.

    A SIGTERM to the script then exits through the callers' ``finally: stop_server(proc)`` (Python's
    default would end the script at once and leave the server running in its own group)."""
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    env = {
        **os.environ,
        "GRADIO_SERVER_NAME": "127.0.0.1",
        "GRADIO_SERVER_PORT": str(port),
        "PYTHONUNBUFFERED": "1",
        **(extra_env or {}),
    }
    env.pop("TRITON_INTERPRET", None)
    out = open(log_path, "w") if log_path else subprocess.DEVNULL

    def limit():
        if limit_as:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (int(limit_as), int(limit_as)))

    proc = subprocess.Popen(
        [sys.executable, "app.py"],
        cwd=ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=limit,
    )
    deadline = time.time() + 180
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"app.py exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/config", timeout=2):
                return proc
        except OSError:
            pass
        if time.time() > deadline:
            stop_server(proc)
            raise RuntimeError("app.py did not start within 180 s")
        time.sleep(0.5)


def stop_server(proc: subprocess.Popen) -> None:
    """Stop our own server (its process group only)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# Counts the bytes of Gradio's event streams inside the page. Gradio's client reads each stream
# (``/queue/data``) with ``fetch``; the DevTools protocol's ``Network.dataReceived`` misses the body
# of some of these streamed responses (seen in Chromium 156 with network emulation on: whole events
# of 100-270 kB went uncounted), so the stream's bytes are counted where the page reads them.
STREAM_JS = """(() => {
  if (window.__wire) return;
  const w = window.__wire = {bytes: 0};
  const fetch0 = window.fetch;
  window.fetch = async function (...args) {
    const res = await fetch0.apply(this, args);
    const url = String((args[0] && args[0].url) || args[0]);
    if (!url.includes('/queue/data') || !res.body) return res;
    const count = new TransformStream({transform(chunk, ctl) {
      w.bytes += chunk.byteLength; ctl.enqueue(chunk); }});
    return new Response(res.body.pipeThrough(count), {status: res.status, statusText: res.statusText,
                                                       headers: res.headers});
  };
})()"""


class Wire:
    """Bytes received by one page, by kind: ``stream`` (Gradio's event streams: the outputs of every
    event, uncompressed, counted in the page by ``STREAM_JS``), ``page`` (the HTML document) and
    ``other`` (both as sent on the wire, compressed, from the DevTools protocol's
    ``Network.loadingFinished``). ``data:`` URLs (images Plotly makes in the page)
    never cross the network. Attach it before the page loads the app: the stream counter wraps the
    page's ``fetch`` on navigation (and starts from 0 on every new document)."""

    def __init__(self, page, mbit: float, latency_ms: float):
        self.page = page
        self.cdp_bytes = {"page": 0, "other": 0}
        self.last = time.perf_counter()
        self.urls = {}
        page.add_init_script(STREAM_JS)
        self.cdp = page.context.new_cdp_session(page)
        self.cdp.on("Network.requestWillBeSent", self._sent)
        self.cdp.on("Network.loadingFinished", self._finished)
        self.cdp.send("Network.enable")
        rate = mbit * 1e6 / 8  # bytes per second
        self.cdp.send(
            "Network.emulateNetworkConditions",
            {"offline": False, "latency": latency_ms, "downloadThroughput": rate, "uploadThroughput": rate},
        )

    def _sent(self, ev: dict) -> None:
        self.urls[ev["requestId"]] = (ev.get("type", ""), ev["request"]["url"])

    def _finished(self, ev: dict) -> None:
        """A request's bytes on the wire (compressed, headers included), once it has finished."""
        kind, url = self.urls.get(ev["requestId"], ("", ""))
        if url.startswith("data:") or "/queue/data" in url:
            return  # streams are counted in the page
        path = url.split("?")[0]
        page = kind in ("Document", "Other") and not path.endswith((".ico", ".js", ".css", ".png", ".woff2"))
        self.cdp_bytes["page" if page else "other"] += int(ev.get("encodedDataLength") or 0)
        self.last = time.perf_counter()

    def _stream(self) -> int:
        try:
            return int(self.page.evaluate("() => window.__wire ? window.__wire.bytes : 0"))
        except Exception:  # noqa: BLE001 - a page between documents: nothing counted yet
            return 0

    @property
    def bytes(self) -> dict:
        return {"stream": self._stream(), **self.cdp_bytes}

    def total(self) -> int:
        return sum(self.bytes.values())

    def settle(self, page=None, quiet_s: float = 1.5, limit_s: float = 30.0) -> None:
        """Wait until nothing has arrived for ``quiet_s`` (the follow-up events are done)."""
        page = page or self.page
        end = time.perf_counter() + limit_s
        seen = self.total()
        while time.perf_counter() < end and time.perf_counter() - self.last < quiet_s:
            page.wait_for_timeout(200)
            now = self.total()
            if now != seen:
                seen, self.last = now, time.perf_counter()


def measure(url: str, mbit: float, latency_ms: float, runs: int, first_runs: int = 1) -> dict:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium is not installed (apt-get install -y chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS)
        try:
            firsts, ctx = [], None
            for _ in range(first_runs):  # each in a fresh context: no cache, no compiled code kept
                if ctx is not None:
                    ctx.close()
                ctx = browser.new_context(viewport={"width": 1600, "height": 1100})
                page = ctx.new_page()
                wire = Wire(page, mbit, latency_ms)
                t0 = time.perf_counter()
                page.goto(url)
                page.wait_for_function(TITLE_JS, arg="full", timeout=120_000)
                first = {"bytes": wire.total(), "s": time.perf_counter() - t0}
                wire.settle(page)  # the page's load events (analysis, views)
                first["all_bytes"] = wire.total()
                firsts.append(first)
            redraws = []
            for n in range(runs):
                target = "sliding_window" if n % 2 == 0 else "full"
                page.locator("#ctl-attention input").first.click()
                option = page.get_by_role("option", name=target, exact=True)
                page.evaluate(ARM_JS, target)
                before = dict(wire.bytes)
                t0 = time.perf_counter()
                option.click()
                took = page.wait_for_function(DRAWN_JS, timeout=60_000).json_value()
                harness = time.perf_counter() - t0
                at_grid = wire.total() - sum(before.values())
                wire.settle(page)  # the follow-up events (views, analysis) finish before the next change
                redraws.append(
                    {
                        "s": took,
                        "harness": harness,
                        "bytes": at_grid,
                        **{k: wire.bytes[k] - before[k] for k in wire.bytes},
                    }
                )
            ctx.close()
        finally:
            browser.close()
    return {"firsts": firsts, "redraws": redraws}


def server_ms(url: str) -> float:
    """Server-side time of one default attention redraw (via the API), to tell a busy machine apart."""
    from gradio_client import Client

    client = Client(url, verbose=False)
    t0 = time.perf_counter()
    client.predict("{}", "The quick brown fox", api_name="/analyze")
    return 1000 * (time.perf_counter() - t0)


def grid_json_bytes() -> int:
    """``len(fig.to_json())`` of the attention grid at the default config and text (what Gradio sends)."""

    from explorer.app.controls.share import DEFAULT_TEXT
    from models import ModelConfig

    return len(attention_grid(attention_maps(ModelConfig(), DEFAULT_TEXT)).to_json())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="a running app (default: start python app.py on a free port)")
    ap.add_argument("--mbit", type=float, default=10.0)
    ap.add_argument("--latency-ms", type=float, default=40.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--first", type=int, default=3, help="first paints, each in a fresh browser context (1-10)")
    args = ap.parse_args(argv)
    proc = None
    url = args.url
    if url is None:
        port = free_port()
        proc = start_server(port)
        url = f"http://127.0.0.1:{port}/"
    try:
        with BusyWatch() as watch:
            res = measure(url, args.mbit, args.latency_ms, max(1, min(args.runs, 10)), max(1, min(args.first, 10)))
            busy_ms = server_ms(url)
    finally:
        if proc is not None:
            stop_server(proc)
    print(
        f"link: {args.mbit:g} Mbit/s, {args.latency_ms:g} ms latency (CDP emulation); "
        f"attention grid JSON at the default config: {grid_json_bytes() / 1e3:.0f} kB"
    )
    print(
        f"{'what':<14}{'s to grid':>10}{'harness s':>10}{'kB to grid':>12}{'kB stream':>11}{'kB page':>9}"
        f"{'kB other':>10}"
    )
    for n, f in enumerate(res["firsts"]):
        print(
            f"{'first paint ' + str(n + 1):<14}{f['s']:>10.2f}{'':>10}{f['bytes'] / 1e3:>12.0f}   (all requests once "
            f"settled: {f['all_bytes'] / 1e3:.0f} kB)"
        )
    if len(res["firsts"]) > 1:
        times = [f["s"] for f in res["firsts"]]
        print(
            f"first paint over {len(times)} fresh contexts: median {statistics.median(times):.2f} s, "
            f"max {max(times):.2f} s (target 3 s)"
        )
    for n, r in enumerate(res["redraws"]):
        print(
            f"{'redraw ' + str(n + 1):<14}{r['s']:>10.2f}{r['harness']:>10.2f}{r['bytes'] / 1e3:>12.0f}"
            f"{r['stream'] / 1e3:>11.0f}{r['page'] / 1e3:>9.0f}{r['other'] / 1e3:>10.0f}"
        )
    med = statistics.median(r["s"] for r in res["redraws"])
    worst = max(r["s"] for r in res["redraws"])
    print(
        f"median redraw (click to grid drawn): {med:.2f} s, max {worst:.2f} s; timed from Python: median "
        f"{statistics.median(r['harness'] for r in res['redraws']):.2f} s; one /analyze call on the server: "
        f"{busy_ms:.0f} ms"
    )
    print(watch.note())
    if busy_ms > 1500:
        print("note: the server was slow to compute (a busy machine): the times above are not stable figures")


if __name__ == "__main__":
    main()
