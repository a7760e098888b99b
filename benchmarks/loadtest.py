"""Load test of the running app through its public API, bounded in users, requests and seconds.

``python -m benchmarks.loadtest [--users 1,4,16,32] [--requests 6] [--seconds 60] [--heavy-sweep] [--heavy-jobs]``
starts ``python app.py`` on 127.0.0.1 (or drives ``--url``, on 127.0.0.1 only), then for each
number of users N runs N concurrent ``gradio_client`` users, each from its own loopback address
(``benchmarks.sources``). Each makes up to ``--requests``
calls within ``--seconds``: mostly ``/analyze`` on a varied small config and text (seeded, so
results are not simply served from the cache), some ``/gradients``, and one hostile request
(a Linformer config whose size hides in a product of fields) that must come back *refused* with a message, not crash
anything. With ``--heavy-sweep`` a ``/benchmark`` forward_backward sweep to 4096 tokens runs alongside. With
``--heavy-jobs`` each level runs twice, alone and then beside the heavy work a public Space sees
(two visitors training, one running a reproduction, one exporting in a loop), and the table adds the
loaded p95 over the unloaded one: what a visitor of the interactive tabs feels (the target is 2x).

It prints one row per N: requests that succeeded, were refused (ConfigError messages), were
turned away as busy (the queue was full: Gradio's "Queue is full" answer, the designed reply to
more waiting requests than ``EXPLORER_QUEUE_SIZE``), failed (anything else), p50 / p95 / max
latency, throughput, and the server's RSS before, at its peak (sampled every 0.2 s) and after
(``/proc/PID/status``; only when it started the server). It says how much CPU other processes used
while it ran (``kernels.tools.busy``: the machine's busy time minus this process's and its server's) and
calls the figures unstable when that was a quarter of a core or more, since the latencies then
measure the neighbours too. It stops its own server when done.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import threading
import time
from dataclasses import dataclass, field

from benchmarks import sources
from benchmarks.netcheck import free_port, start_server, stop_server
from kernels.tools.busy import BusyWatch

ATTENTIONS = ["full", "sliding_window", "dilated_window", "strided", "block_local", "longformer", "bigbird"]
POSITIONS = ["rope", "alibi", "sinusoidal", "t5"]
HOSTILE = {"attention": "linformer", "causal": False, "proj_len": 65536, "max_len": 8192, "n_layers": 12}
WORDS = "attention is all you need sparse patterns cost what they should on every backend".split()


def visitor(url: str, uid: int):
    """Visitor ``uid``: a ``gradio_client`` whose connections leave from its own loopback address
    (``benchmarks.sources``), so the app's per-visitor limits count it as one visitor among many."""
    from gradio_client import Client

    sources.install()
    return Client(url, verbose=False, headers=sources.headers(sources.address(uid)))


@dataclass
class Tally:
    latencies: list = field(default_factory=list)
    refused: int = 0
    busy: int = 0
    failed: int = 0
    errors: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, ok: bool, seconds: float, refused: bool = False, busy: bool = False, error: str = "") -> None:
        with self.lock:
            if ok:
                self.latencies.append(seconds)
            elif refused:
                self.refused += 1
            elif busy:
                self.busy += 1
            else:
                self.failed += 1
                if len(self.errors) < 5:
                    self.errors.append(error[:200])


def rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _request(rng: random.Random, n: int) -> tuple:
    """``(api_name, args, expect_refusal)`` of a user's ``n``-th request."""
    if n == 1:
        return "/analyze", (json.dumps(HOSTILE), "abc"), True
    cfg = {
        "attention": rng.choice(ATTENTIONS),
        "position": rng.choice(POSITIONS),
        "seed": rng.randrange(10**6),
        "n_layers": rng.choice([2, 4]),
        "window": rng.choice([8, 16, 32]),
    }
    if n % 4 == 3:
        return "/gradients", (json.dumps(cfg),), False
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(4, 40)))
    return "/analyze", (json.dumps(cfg), text), False


def _is_refusal(exc: Exception) -> bool:
    return "is not valid" in str(exc)  # the ConfigError message the API returns as the client's error


def _is_busy(exc: Exception) -> bool:
    return "queue is full" in str(exc).lower()  # Gradio's answer when the queue holds max_size events


def _user(url: str, uid: int, requests: int, deadline: float, tally: Tally) -> None:
    try:
        client = visitor(url, uid)
    except Exception as exc:  # the server did not even answer the handshake
        tally.add(False, 0.0, error=f"connect: {type(exc).__name__}: {exc}")
        return
    rng = random.Random(uid)
    for n in range(requests):
        if time.time() >= deadline:
            return
        api, args, refusal = _request(rng, n)
        t0 = time.perf_counter()
        try:
            client.predict(*args, api_name=api)
            tally.add(
                not refusal, time.perf_counter() - t0, error="" if not refusal else "the hostile config was accepted"
            )
        except Exception as exc:
            tally.add(
                False,
                time.perf_counter() - t0,
                refused=refusal and _is_refusal(exc),
                busy=_is_busy(exc),
                error=f"{api}: {type(exc).__name__}: {exc}",
            )


def _sweep(url: str, deadline: float, done: threading.Event, out: dict) -> None:
    client = visitor(url, 1000)
    runs = 0
    while not done.is_set() and time.time() < deadline:
        t0 = time.perf_counter()
        try:
            client.predict("{}", "512,1024,2048,4096", "forward_backward", api_name="/benchmark")
            runs += 1
        except Exception as exc:
            out["error"] = f"{type(exc).__name__}: {exc}"[:200]
            return
        out["seconds"] = out.get("seconds", 0.0) + time.perf_counter() - t0
    out["runs"] = runs


TRAIN = dict(n_layers=2, d_model=64, n_heads=4, max_len=256, position="rope")


def _heavy_jobs(url: str, done: threading.Event, out: dict) -> None:
    """Two trainings, a reproduction and a loop of exports, from four visitors, until ``done``."""
    visitors = [visitor(url, 1001 + i) for i in range(4)]
    jobs = [
        v.submit(json.dumps(TRAIN), "copy", 2000, 3e-3, 30, "cosine", 32, 64, 0, "", "trained", api_name="/train_play")
        for v in visitors[:2]
    ]
    jobs.append(visitors[2].submit("extrapolation", api_name="/train_reproduce"))
    exports = 0
    while not done.is_set():
        try:
            visitors[3].predict(json.dumps({"attention": "bigbird"}), "heavy work beside", "=>", api_name="/export")
            exports += 1
        except Exception as exc:
            out["error"] = f"{type(exc).__name__}: {exc}"[:200]
            done.wait(1.0)
    for v in visitors[:2]:
        v.predict(api_name="/train_pause")
    visitors[2].predict(api_name="/train_reproduce_stop")
    for job in jobs:
        try:
            job.result(timeout=60)
        except Exception as exc:
            out["error"] = f"{type(exc).__name__}: {exc}"[:200]
    out["exports"] = exports


def _pct(values: list, q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] if s else float("nan")


def run_level(
    url: str, users: int, requests: int, seconds: float, pid: int | None, heavy: bool, jobs: bool = False
) -> dict:
    tally = Tally()
    deadline = time.time() + seconds
    before = rss_bytes(pid) if pid else None
    peak = [before or 0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            r = rss_bytes(pid) if pid else None
            if r:
                peak[0] = max(peak[0], r)
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    sweep_out: dict = {}
    sweeper = threading.Thread(target=_sweep, args=(url, deadline, done, sweep_out), daemon=True) if heavy else None
    if sweeper:
        sweeper.start()
    jobs_out: dict = {}
    worker = threading.Thread(target=_heavy_jobs, args=(url, done, jobs_out), daemon=True) if jobs else None
    if worker:
        worker.start()
        time.sleep(5.0)  # the heavy work is running before the visitors come
        deadline = time.time() + seconds
    t0 = time.perf_counter()
    threads = [
        threading.Thread(target=_user, args=(url, u, requests, deadline, tally), daemon=True) for u in range(users)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(1.0, deadline - time.time() + 120))  # a request in flight may finish late
    wall = time.perf_counter() - t0
    done.set()
    if sweeper:
        sweeper.join(timeout=300)
    if worker:
        worker.join(timeout=300)
    sampler.join(timeout=2)
    time.sleep(1.0)  # let the server finish freeing
    lat = tally.latencies
    return {
        "users": users,
        "ok": len(lat),
        "refused": tally.refused,
        "busy": tally.busy,
        "failed": tally.failed,
        "p50": _pct(lat, 0.5),
        "p95": _pct(lat, 0.95),
        "max": max(lat) if lat else float("nan"),
        "throughput": len(lat) / wall if wall > 0 else 0.0,
        "rss_before": before,
        "rss_peak": peak[0],
        "rss_after": rss_bytes(pid) if pid else None,
        "errors": tally.errors,
        "sweep": sweep_out,
        "heavy_jobs": jobs_out if jobs else None,
    }


def _mb(n) -> str:
    return f"{n / 2**20:.0f}" if n else "-"


def print_table(rows: list, heavy: bool) -> None:
    print(
        f"{'users':>5} {'ok':>5} {'refused':>8} {'busy':>5} {'failed':>7} {'p50 s':>7} {'p95 s':>7} {'max s':>7} "
        f"{'req/s':>6} {'RSS MB before':>14} {'peak':>6} {'after':>6}" + ("  sweep" if heavy else "")
    )
    for r in rows:
        sweep = ""
        if heavy:
            s = r["sweep"]
            sweep = f"  {s.get('runs', 0)} runs" + (f" ({s['error']})" if "error" in s else "")
        print(
            f"{r['users']:>5} {r['ok']:>5} {r['refused']:>8} {r['busy']:>5} {r['failed']:>7} "
            f"{r['p50']:>7.2f} {r['p95']:>7.2f} "
            f"{r['max']:>7.2f} {r['throughput']:>6.2f} {_mb(r['rss_before']):>14} {_mb(r['rss_peak']):>6} "
            f"{_mb(r['rss_after']):>6}{sweep}"
        )
        if r.get("heavy_jobs") is not None:
            alone = next((a for a in rows if a["users"] == r["users"] and a.get("heavy_jobs") is None), None)
            ratio = r["p95"] / alone["p95"] if alone and alone["p95"] else float("nan")
            h = r["heavy_jobs"]
            print(
                f"      ^ beside 2 trainings, a reproduction and {h.get('exports', 0)} exports: p95 x{ratio:.1f} "
                "of the same users alone" + (f" ({h['error']})" if "error" in h else "")
            )
        for e in r["errors"]:
            print(f"      failure: {e}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="a running app on 127.0.0.1 (default: start python app.py)")
    ap.add_argument("--users", default="1,4,16,32", help="comma-separated numbers of concurrent users")
    ap.add_argument("--requests", type=int, default=6, help="requests per user (at most 50)")
    ap.add_argument("--seconds", type=float, default=60.0, help="time limit per level (at most 600)")
    ap.add_argument("--heavy-sweep", action="store_true", help="run a forward_backward sweep alongside")
    ap.add_argument(
        "--heavy-jobs",
        action="store_true",
        help="each level alone, then beside trainings, a reproduction and exports (p95 ratio)",
    )
    ap.add_argument("--cache-bytes", help="EXPLORER_CACHE_BYTES of the server it starts (e.g. 256M)")
    ap.add_argument("--request-budget", help="EXPLORER_REQUEST_BUDGET of the server it starts (e.g. 1G)")
    args = ap.parse_args(argv)
    levels = [max(1, min(64, int(u))) for u in args.users.split(",") if u.strip()]
    requests, seconds = max(1, min(args.requests, 50)), max(1.0, min(args.seconds, 600.0))
    if args.url and not args.url.startswith(("http://127.0.0.1", "http://localhost")):
        raise SystemExit("the load test only drives an app on 127.0.0.1")
    proc, url = None, args.url
    if url is None:
        port = free_port()
        env = {
            k: v
            for k, v in (("EXPLORER_CACHE_BYTES", args.cache_bytes), ("EXPLORER_REQUEST_BUDGET", args.request_budget))
            if v
        }
        proc = start_server(port, extra_env=env)
        url = f"http://127.0.0.1:{port}/"
    pid = proc.pid if proc is not None else None
    rows = []
    try:
        with BusyWatch() as watch:  # the server is this process's child: its CPU is the test's own
            for users in levels:
                rows.append(run_level(url, users, requests, seconds, pid, args.heavy_sweep))
                if args.heavy_jobs:
                    rows.append(run_level(url, users, requests, seconds, pid, args.heavy_sweep, jobs=True))
    finally:
        if proc is not None:
            stop_server(proc)
    from explorer.runtime.budget import human, request_budget
    from explorer.runtime.cache import cache_budget

    print(
        f"load test of {url} ({requests} requests per user, {seconds:g} s per level"
        f"{', a forward_backward sweep to 4096 running alongside' if args.heavy_sweep else ''})"
    )
    if proc is not None:
        os.environ.update(
            {
                k: v
                for k, v in (
                    ("EXPLORER_CACHE_BYTES", args.cache_bytes),
                    ("EXPLORER_REQUEST_BUDGET", args.request_budget),
                )
                if v
            }
        )
        print(
            f"server: per-request budget {human(request_budget())}, result cache {human(cache_budget())} "
            "(RSS after = baseline + what the cache keeps)"
        )
    print_table(rows, args.heavy_sweep)
    if proc is not None:
        print(watch.note())  # other processes' CPU while the levels ran, this test's clients and server apart
    else:
        print(
            "machine: not measured (the server at --url is not this process's child, so its work would "
            "count as other processes')"
        )
    if any(r["failed"] for r in rows):
        print("FAILURES: see the lines above")
    lat_all = [r["p50"] for r in rows if r["ok"]]
    if lat_all:
        print(f"median of the levels' p50: {statistics.median(lat_all):.2f} s")


if __name__ == "__main__":
    main()
