"""The Train tab in Debian's Chromium at 1280x720 while it trains: does it fit one screen, how far the
drawn step lags the trainer, and how busy the page's main thread is.

    python -m benchmarks.train_tab_browser [--root DIR] [--seconds 20] [--steps 2000] [--click-every 1]

Serves ``python app.py`` from ``--root`` (default: this checkout; another checkout measures the code
before a change) on a free port, opens it in headless Chromium (Playwright) at 1280x720, opens the
Train tab and prints:

- where ▶ Play, the loss curves and the probe map start (y of their top, px, page scrolled to the top)
  against the viewport's 720 px;
- while training ``--steps`` steps for ``--seconds`` seconds: the status redraws per second, and the
  main thread's busy fraction (the sum of the ``longtask`` entries, tasks over 50 ms, in the window);
- the page's answer to clicks while it trains: a click on the status line about every
  ``--click-every`` seconds, timed by Chromium's Event Timing API (``PerformanceEventTiming``: from
  the input to the next paint after its handlers ran; entries exist only for events of 16 ms and
  more, so a click without one answered faster): the worst and the median, target <= 100 ms;
- then ❚❚ Pause: the seconds until the page shows "stopped at step N", and the lag in steps between
  the last step drawn before the pause and N (snapshots queued on their way to the page show as both);
- the JSON bytes of the three figures of one snapshot (the payload of one redraw), server side.

Timings depend on the machine and its load: run it on a quiet machine, before and after a change.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

# what the page records from its first script on: long tasks, and each step the status shows (page time)
INIT_JS = """(() => {
  window.__long = []; window.__steps = []; window.__events = [];
  new PerformanceObserver(l => l.getEntries().forEach(e => window.__long.push([e.startTime, e.duration])))
    .observe({type: 'longtask', buffered: true});
  new PerformanceObserver(l => l.getEntries().forEach(e => window.__events.push([e.name, e.startTime, e.duration])))
    .observe({type: 'event', durationThreshold: 16, buffered: true});
  const watch = () => {
    const el = document.querySelector('#train-status');
    if (!el) { setTimeout(watch, 200); return; }
    let last = null;
    new MutationObserver(() => { const m = (el.innerText || '').match(/step (\\d+) \\//);
      const s = m ? parseInt(m[1]) : null;
      if (s !== null && s !== last) { last = s; window.__steps.push([performance.now(), s]); } })
      .observe(el, {subtree: true, childList: true, characterData: true});
  };
  watch();
})();"""
BOX_JS = """(sel) => { const e = document.querySelector(sel); if (!e) return null;
  const r = e.getBoundingClientRect(); return [Math.round(r.top), Math.round(r.bottom)]; }"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(root: Path, log):
    port = _free_port()
    env = {
        **os.environ,
        "GRADIO_SERVER_NAME": "127.0.0.1",
        "GRADIO_SERVER_PORT": str(port),
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(root),
    }
    proc = subprocess.Popen(
        [sys.executable, "app.py"], cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"app.py exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "config", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.5)
    raise SystemExit("app.py did not start in 180 s")


def _payload_bytes() -> dict:
    """JSON bytes of one snapshot's three figures, at the tab's default settings (server side)."""
    import asyncio

    from explorer.app.tabs.parts import train_runs
    from explorer.app.tabs.train import small_config

    cfg = json.dumps(small_config().to_dict())

    async def run():
        return [o async for o in train_runs.play(None, cfg, "copy", 20, 3e-3, 0, "cosine", 32, 32, 0, "", "trained")]

    last = asyncio.run(run())[-1]
    return {name: len(fig.to_json()) for name, fig in zip(("curves", "attention", "grads"), last[2:])}


def measure(url: str, seconds: float, steps: int, click_every: float = 1.0) -> dict:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS)
        page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
        page.add_init_script(INIT_JS)
        page.goto(url)
        page.wait_for_function(
            "() => { const e = document.querySelector('#attention-grid .js-plotly-plot'); "
            "return e && e.data && e.data.length > 0; }",
            timeout=180_000,
        )  # the first paint
        page.wait_for_timeout(2000)
        page.get_by_role("tab", name="Train").click()
        page.wait_for_selector("#train-play", state="visible", timeout=30_000)
        page.wait_for_timeout(1500)
        page.evaluate(
            "() => { window.scrollTo(0, 0); document.querySelectorAll('*').forEach(e => "
            "{ if (e.scrollTop) e.scrollTop = 0; }); }"
        )
        fit = {
            k: page.evaluate(BOX_JS, sel)
            for k, sel in (
                ("play", "#train-play"),
                ("curves", "#train-curves"),
                ("attention", "#train-attention"),
                ("grads", "#train-grads"),
            )
        }
        box = page.locator("#train-steps input").first
        box.fill(str(steps))
        box.press("Tab")
        page.wait_for_timeout(500)
        page.click("#train-play")
        page.wait_for_function("() => window.__steps.length > 0", timeout=180_000)
        t0 = page.evaluate("() => performance.now()")
        clicks, status = [], page.locator("#train-status")
        while page.evaluate("() => performance.now()") - t0 < seconds * 1000:
            clicks.append(page.evaluate("() => performance.now()"))
            status.click(timeout=10_000)
            page.wait_for_timeout(int(click_every * 1000))
        t1, drawn, events = page.evaluate("() => [performance.now(), window.__steps.slice(), window.__events.slice()]")
        page.click("#train-pause")
        t_pause = page.evaluate("() => performance.now()")
        page.wait_for_function(
            "() => document.querySelector('#train-status').innerText.includes('stopped at step')", timeout=300_000
        )
        t_stop, stopped = page.evaluate("""() => [performance.now(),
            parseInt(document.querySelector('#train-status').innerText.match(/stopped at step (\\d+)/)[1])]""")
        longs = page.evaluate("() => window.__long.slice()")
        browser.close()
    busy = sum(max(0.0, min(s + d, t1) - max(s, t0)) for s, d in longs)
    # each click's slowest event (pointerdown, pointerup, click) from its input to the next paint; 0 when
    # none reached the 16 ms threshold of the Event Timing API
    answers = [
        max(
            [d for name, s, d in events if name in ("pointerdown", "pointerup", "click") and c <= s < c + 1000] or [0.0]
        )
        for c in clicks
    ]
    in_window = [s for t, s in drawn if t0 <= t <= t1]
    return {
        "viewport_h": 720,
        "top_bottom_px": fit,
        "window_s": round((t1 - t0) / 1000, 1),
        "redraws_per_s": round(len(in_window) / ((t1 - t0) / 1000), 2),
        "main_thread_busy": round(busy / (t1 - t0), 3),
        "clicks": len(answers),
        "click_to_paint_ms_max": round(max(answers or [0.0])),
        "click_to_paint_ms_median": round(statistics.median(answers)) if answers else None,
        "clicks_over_100_ms": sum(a > 100 for a in answers),
        "last_drawn_step_before_pause": drawn[-1][1] if drawn else None,
        "stopped_at_step": stopped,
        "lag_steps": stopped - (drawn[-1][1] if drawn else 0),
        "pause_to_shown_s": round((t_stop - t_pause) / 1000, 2),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(ROOT), help="checkout whose app.py is served (default: this one)")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--click-every", type=float, default=1.0, help="seconds between clicks while training")
    ap.add_argument("--no-payload", action="store_true", help="skip the server-side payload measurement")
    a = ap.parse_args(argv)
    with tempfile.NamedTemporaryFile("w", prefix="train-tab-browser-", suffix=".log") as log:
        proc, url = _serve(Path(a.root), log)
        try:
            out = measure(url, a.seconds, a.steps, a.click_every)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)  # the server this script started, its own process group
            proc.wait(timeout=30)
    if not a.no_payload:
        out["snapshot_figure_json_bytes"] = _payload_bytes()
    print(json.dumps({"root": a.root, **out}, indent=1))


if __name__ == "__main__":
    main()
