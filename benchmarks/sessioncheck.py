"""Memory of idle sessions: the server's RSS with N loaded-then-idle pages, before and after they expire.

``python -m benchmarks.sessioncheck [--pages 100] [--ttl 60] [--batch 5]`` starts ``python app.py``
on 127.0.0.1 with ``EXPLORER_SESSION_TTL=--ttl``, reads its RSS (``/proc/PID/status``), opens
``--pages`` pages in Debian's Chromium (``--batch`` at a time), each waiting until its page-load
events are done (the zoomed head drawn, then no event for 2 s), then closes them: Gradio keeps each one's session (its
states and its copy of the outputs). It prints the RSS after the loads, then waits until the sessions are
idle for the TTL plus one expiry period and prints the RSS again, with how many sessions Gradio
still knows (``/gradio_api/deep_link`` answers "" for a session it does not hold). It stops its own
server when done.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
import urllib.request

from benchmarks.netcheck import ARGS, free_port, start_server, stop_server

LOADED_JS = "() => !!document.querySelector('#zoom-plot .js-plotly-plot')"  # the load chain's 2nd event


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def load_pages(url: str, pages: int, batch: int) -> list:
    """Open and close ``pages`` pages -> their Gradio session hashes."""
    from playwright.sync_api import sync_playwright

    hashes = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=ARGS)
        try:
            done = 0
            while done < pages:
                opened = []
                for _ in range(min(batch, pages - done)):
                    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
                    page = ctx.new_page()
                    seen = []
                    page.on(
                        "request", lambda r, seen=seen: seen.append(r.post_data) if "/queue/join" in r.url else None
                    )
                    page.goto(url, wait_until="commit")
                    opened.append((ctx, page, seen))
                for ctx, page, seen in opened:
                    page.wait_for_function(LOADED_JS, timeout=180_000)
                    while True:  # the rest of the load chain (views, analysis, compare)
                        n = len(seen)
                        page.wait_for_timeout(2_000)
                        if len(seen) == n:
                            break
                    hashes.append(next(json.loads(d)["session_hash"] for d in seen if d))
                    ctx.close()
                done += len(opened)
        finally:
            browser.close()
    return hashes


def held(url: str, hashes: list) -> int:
    """How many of ``hashes`` Gradio still holds (probing only after expiry: a probe refreshes a session)."""
    n = 0
    for h in hashes:
        with urllib.request.urlopen(f"{url}gradio_api/deep_link?session_hash={h}", timeout=30) as r:
            n += json.loads(r.read() or b'""') != ""
    return n


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=100)
    ap.add_argument("--ttl", type=float, default=60.0, help="EXPLORER_SESSION_TTL of the server, seconds")
    ap.add_argument("--batch", type=int, default=5)
    args = ap.parse_args(argv)
    pages, ttl = max(1, min(args.pages, 500)), max(1.0, min(args.ttl, 3600.0))
    port = free_port()
    proc = start_server(port, extra_env={"EXPLORER_SESSION_TTL": str(ttl)})
    url = f"http://127.0.0.1:{port}/"
    try:
        base = rss_mb(proc.pid)
        t0 = time.time()
        hashes = load_pages(url, pages, max(1, min(args.batch, 20)))
        loaded = rss_mb(proc.pid)
        took = time.time() - t0
        time.sleep(ttl + max(0.5, min(60.0, ttl / 4)) + 3)
        after = rss_mb(proc.pid)
        alive = held(url, hashes)
    finally:
        stop_server(proc)
    print(f"load average {os.getloadavg()[0]:.2f}; {pages} pages loaded in {took:.0f} s; TTL {ttl:g} s")
    print(f"{'RSS MB':<8}{'start':>8}{'loaded':>8}{'expired':>9}   sessions held after expiry")
    print(f"{'':<8}{base:>8.0f}{loaded:>8.0f}{after:>9.0f}   {alive} of {len(hashes)}")
    print(f"per loaded session: {(loaded - base) / pages:.1f} MB; returned after expiry: {loaded - after:.0f} MB")


if __name__ == "__main__":
    main()
