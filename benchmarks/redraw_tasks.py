"""How long the page's main thread is blocked when a dropdown change redraws the maps, in Debian's Chromium.

    python -m benchmarks.redraw_tasks [--root DIR] [--changes 8] [--profile N]

Serves ``python app.py`` from ``--root`` (default: this checkout; another checkout measures the code before a
change) on a free port, opens it at 1280x720, waits for the first paint, then picks ``--changes`` attention
patterns one after another in the Attention dropdown (each waits for the grid to be redrawn and the page to be
quiet for 1.5 s). For each change it prints the main thread's long tasks (Chromium's ``longtask`` entries:
tasks over 50 ms) from the pick until quiet: the longest, their sum, and the seconds from the pick to the
redrawn grid. ``--profile N`` also records a JavaScript CPU profile (DevTools ``Profiler``) over the first N
changes and prints the functions with the most self time, grouped by script, so the cost can be placed.

The target (issue: a page that never freezes) is no task over 200 ms on a redraw, on a quiet machine. Times
depend on the machine and its load: run it on a quiet machine, before and after a change.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import tempfile
from pathlib import Path

from benchmarks.netcheck import free_port, start_server, stop_server

ROOT = Path(__file__).resolve().parents[1]
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PATTERNS = ("sliding_window", "bigbird", "strided", "full", "longformer", "dilated_window", "block_local", "fixed")

INIT_JS = """(() => { window.__long = [];
  new PerformanceObserver((l) => l.getEntries().forEach((e) => window.__long.push([e.startTime, e.duration])))
    .observe({type: 'longtask', buffered: true}); })()"""
GRID_DATA_JS = (
    "() => { const e = document.querySelector('#attention-grid .js-plotly-plot'); "
    "return e && e.data && e.data.length; }"
)


def _pick(page, option: str) -> None:
    """The Attention dropdown set to ``option`` by typing it and pressing Enter, as a keyboard user would."""
    field = page.locator("#ctl-attention input").first
    field.click()
    page.keyboard.press("Control+A")
    page.keyboard.type(option)
    page.get_by_role("option", name=option, exact=True).wait_for()
    page.keyboard.press("Enter")


def _quiet(page, ms: int = 1500, timeout_ms: int = 120_000) -> None:
    """Until no long task and no running event for ``ms``."""
    page.wait_for_function(
        f"""() => {{ const l = window.__long, now = performance.now();
        const last = l.length ? l[l.length - 1][0] + l[l.length - 1][1] : 0;
        const busy = document.querySelector('.progress-text, .eta-bar, .generating');
        return !busy && now - last > {ms}; }}""",
        timeout=timeout_ms,
        polling=250,
    )


def _top_functions(profile: dict, top: int = 15) -> list:
    """[(self ms, function, script)] of a DevTools CPU profile, most self time first."""
    nodes = {n["id"]: n for n in profile["nodes"]}
    dt = collections.Counter()
    for node_id, delta in zip(profile.get("samples", []), profile.get("timeDeltas", [])):
        dt[node_id] += delta
    by_fn = collections.Counter()
    for node_id, us in dt.items():
        f = nodes[node_id]["callFrame"]
        script = (f.get("url") or "").rsplit("/", 1)[-1][:40] or "(native)"
        by_fn[(f.get("functionName") or "(anonymous)", script)] += us / 1000
    return [(round(ms, 1), fn, script) for (fn, script), ms in by_fn.most_common(top)]


def measure(url: str, changes: int, profile: int) -> dict:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    rows, top = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS)
        page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
        page.add_init_script(INIT_JS)
        page.goto(url)
        page.wait_for_function(GRID_DATA_JS, timeout=180_000)
        _quiet(page)
        cdp = page.context.new_cdp_session(page) if profile else None
        if cdp:
            cdp.send("Profiler.enable")
            cdp.send("Profiler.setSamplingInterval", {"interval": 200})
            cdp.send("Profiler.start")
        for i in range(changes):
            option = PATTERNS[i % len(PATTERNS)]
            before = page.evaluate(
                "() => { const e = document.querySelector('#attention-grid .js-plotly-plot');"
                " return JSON.stringify(e.layout.title); }"
            )
            t0 = page.evaluate("() => performance.now()")
            _pick(page, option)
            page.wait_for_function(
                "(b) => { const e = document.querySelector('#attention-grid .js-plotly-plot');"
                " return e && JSON.stringify(e.layout.title) !== b; }",
                arg=before,
                timeout=120_000,
            )
            t_drawn = page.evaluate("() => performance.now()")
            _quiet(page)
            t1 = page.evaluate("() => performance.now()") - 1500
            longs = [(s, d) for s, d in page.evaluate("() => window.__long.slice()") if t0 <= s <= t1]
            rows.append(
                {
                    "pattern": option,
                    "to_grid_s": round((t_drawn - t0) / 1000, 2),
                    "longest_ms": round(max((d for _, d in longs), default=0.0)),
                    "long_sum_ms": round(sum(d for _, d in longs)),
                    "long_tasks": len(longs),
                }
            )
            if cdp and i + 1 == profile:
                top = _top_functions(cdp.send("Profiler.stop")["profile"])
                cdp = None
        browser.close()
    return {"changes": rows, "top_functions": top}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose app.py is served")
    ap.add_argument("--changes", type=int, default=8)
    ap.add_argument("--profile", type=int, default=0, help="profile the first N changes (0: no profile)")
    args = ap.parse_args(argv)
    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="redraw-")) / "app.log"
    import benchmarks.netcheck as net

    net.ROOT = args.root
    proc = start_server(port, str(log))
    try:
        out = measure(f"http://127.0.0.1:{port}/", args.changes, args.profile)
    finally:
        stop_server(proc)
        shutil.rmtree(log.parent, ignore_errors=True)
    print(f"{'pattern':<16}{'to grid s':>10}{'longest ms':>12}{'sum ms':>9}{'tasks':>7}")
    for r in out["changes"]:
        print(f"{r['pattern']:<16}{r['to_grid_s']:>10}{r['longest_ms']:>12}{r['long_sum_ms']:>9}{r['long_tasks']:>7}")
    longest = [r["longest_ms"] for r in out["changes"]]
    print(
        f"longest task over all changes: {max(longest)} ms; median of the per-change longest: "
        f"{sorted(longest)[len(longest) // 2]} ms (target <= 200 ms)"
    )
    if out["top_functions"]:
        print("\nself time over the profiled changes (ms, function, script):")
        for ms, fn, script in out["top_functions"]:
            print(f"{ms:>9}  {fn:<40} {script}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
