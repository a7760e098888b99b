"""Fair to every visitor: attacks from several loopback addresses, and what another visitor gets meanwhile.

    python -m benchmarks.fairness [--root DIR] [--seconds 30] [--only NAME ...] [--json out.json]

Starts ``python app.py`` from ``--root`` (default: this checkout; point it at an older checkout to measure
"before") on 127.0.0.1 and sends each client from its own loopback address (127.0.0.2, 127.0.0.3, ... bound as
the source address: the app sees distinct visitors without trusting any header). Scenarios, each bounded:

- ``one-address``: one address sends the costliest Why requests the caps accept (``/patching`` and ``/ablation``
  with ``mean`` on the largest model and on a medium one, initial weights, each text one byte different), two
  at a time;
- ``four-addresses``: four addresses each keep 8 ``/patching`` requests in flight (the queue's places);
- ``forged-xff``: under ``SPACE_ID`` (a second server), one address opens 70 new sessions and sends 16 events at
  once, each with a different forged ``X-Forwarded-For``;
- ``unread``: ``/long_context`` at the longest length, its result stream never opened;
- ``abandoned``: the same with the stream opened and closed after 3 s.

For each: the victim's (127.0.0.9) ``/analyze`` p50 / p95 while the attack lasts (idle values first), the
refusals it met ("queue is full" included), and the server's CPU (cores) in the 10 s after the attackers left.
Network traffic stays on 127.0.0.0/8; every loop has a deadline.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
VICTIM = "127.0.0.9"
BIG = json.dumps({"n_layers": 7, "n_heads": 16, "d_model": 512, "d_ff": 4096, "vocab_size": 4096})
MEDIUM = json.dumps({"n_layers": 4, "n_heads": 8, "d_model": 256, "d_ff": 1024, "vocab_size": 4096})
TEXT = "the cat sat on the mat and then the cat sat on the mat again while the dog watched the cat " * 2


def client(ip: str, timeout: float = 120.0, **kw) -> httpx.Client:
    """An HTTP client whose connections leave from ``ip`` (a loopback address)."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=ip), timeout=timeout, **kw)


def call(c: httpx.Client, url: str, api: str, data: list, read: bool = True, deadline: float | None = None):
    """``POST /gradio_api/call/<api>`` then read its result stream -> ``(status, seconds, text)``; ``read``
    False: the stream is never opened (status "posted")."""
    t0 = time.perf_counter()
    try:
        r = c.post(f"{url}gradio_api/call/{api}", json={"data": data})
    except httpx.HTTPError as exc:
        return f"error {type(exc).__name__}", time.perf_counter() - t0, ""
    if r.status_code != 200:
        return f"HTTP {r.status_code}", time.perf_counter() - t0, r.text[:200]
    event_id = r.json()["event_id"]
    if not read:
        return "posted", time.perf_counter() - t0, event_id
    said = ""
    try:
        with c.stream("GET", f"{url}gradio_api/call/{api}/{event_id}") as stream:
            for line in stream.iter_lines():
                if line.startswith("event:"):
                    said = line.split(":", 1)[1].strip()
                elif said in ("complete", "error") and line.startswith("data:"):
                    return said, time.perf_counter() - t0, line[5:200]
                if deadline is not None and time.monotonic() > deadline:
                    return "left", time.perf_counter() - t0, ""
    except httpx.HTTPError as exc:
        return f"error {type(exc).__name__}", time.perf_counter() - t0, ""
    return said or "closed", time.perf_counter() - t0, ""


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of the server process (all its threads)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def cores_over(pid: int, seconds: float) -> float:
    c0, t0 = cpu_seconds(pid), time.perf_counter()
    time.sleep(seconds)
    return (cpu_seconds(pid) - c0) / (time.perf_counter() - t0)


def pct(values: list, q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, int(round(q * (len(s) - 1))))], 2)


class Victim:
    """Another visitor: ``/analyze`` of the default config, one after another, until stopped."""

    def __init__(self, url: str):
        self.url, self.times, self.said, self._stop = url, [], {}, threading.Event()

    def run_for(self, seconds: float, gap: float = 0.5) -> Victim:
        deadline = time.monotonic() + seconds
        with client(VICTIM) as c:
            i = 0
            while time.monotonic() < deadline and not self._stop.is_set():
                status, took, text = call(c, self.url, "analyze", ["{}", f"{TEXT[:200]} {i}", "|", "bundled"])
                i += 1
                if status == "complete":
                    self.times.append(took)
                else:
                    key = "queue is full" if "queue is full" in text.lower() else status
                    self.said[key] = self.said.get(key, 0) + 1
                time.sleep(gap)
        return self

    def start(self, seconds: float) -> threading.Thread:
        thread = threading.Thread(target=self.run_for, args=(seconds,), daemon=True)
        thread.start()
        return thread

    def stop(self):
        self._stop.set()

    def summary(self) -> dict:
        return {
            "victim_n": len(self.times),
            "victim_p50_s": pct(self.times, 0.5),
            "victim_p95_s": pct(self.times, 0.95),
            "victim_refused": self.said,
        }


def attackers(url: str, ips: list, per_ip: int, seconds: float, requests) -> dict:
    """Each of ``ips`` keeps ``per_ip`` requests in flight for ``seconds`` (``requests(i)`` -> (api, data)), then
    drops its connections (a request still running is left, not awaited) -> counts of what they got."""
    deadline = time.monotonic() + seconds
    got: dict = {}
    lock = threading.Lock()

    def one(ip, k):
        with client(ip, timeout=seconds + 5) as c:
            n = 0
            while time.monotonic() < deadline:
                api, data = requests(k * 1000 + n)
                status, _, _ = call(c, url, api, data, deadline=deadline)
                n += 1
                with lock:
                    got[status] = got.get(status, 0) + 1
                if status.startswith("HTTP"):
                    time.sleep(0.5)

    threads = [threading.Thread(target=one, args=(ip, k), daemon=True) for ip in ips for k in range(per_ip)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 30)
    return got


def costliest(i: int) -> tuple:
    """The largest model the caps accept, and a smaller one that a per-request compute budget may still accept."""
    text = TEXT[:250] + chr(97 + i % 26)  # one changed byte: a new memo key each time
    model = BIG if i % 4 < 2 else MEDIUM
    if i % 2:
        return "ablation", [model, text, "", "mean", "initial"]
    return "patching", [model, text, "", "initial"]


def patching(i: int) -> tuple:
    return "patching", [BIG, TEXT[:250] + chr(97 + i % 26), "", "initial"]


def measured(url: str, pid: int, seconds: float, attack) -> dict:
    victim = Victim(url)
    thread = victim.start(seconds + 5)
    time.sleep(1.0)
    out = attack()
    victim.stop()
    thread.join(timeout=180)
    out = {"attackers": out, **victim.summary(), "server_cores_after": round(cores_over(pid, 10.0), 2)}
    return out


def forged_xff(url: str) -> dict:
    """One address, many forged ``X-Forwarded-For`` first entries: new sessions and concurrent events accepted."""
    with client("127.0.0.7", timeout=60) as c:
        sessions = sum(
            c.post(
                f"{url}gradio_api/run/undo",
                json={"data": [], "session_hash": secrets.token_hex(8)},
                headers={"X-Forwarded-For": f"10.{i}.0.1"},
            ).status_code
            != 429
            for i in range(70)
        )

    def join(i):
        with client("127.0.0.7", timeout=60) as c:
            r = c.post(
                f"{url}gradio_api/call/analyze",
                json={"data": [BIG, TEXT + str(i), "|", "initial"]},
                headers={"X-Forwarded-For": f"10.99.{i}.1"},
            )
            return r.status_code

    with cf.ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(join, range(16)))
    return {"new_sessions_accepted_of_70": sessions, "events_accepted_of_16": sum(c == 200 for c in codes)}


def long_context(url: str, pid: int, read: bool) -> dict:
    """``/long_context`` at its longest length from 127.0.0.5: ``read`` False: the stream never opened; True:
    opened and closed after 3 s. -> the server's cores 6-16 s after the post, and another job's answer then."""
    data = ["", "16384", "heldout", "", "window", "bundled", 32]
    with client("127.0.0.5", timeout=30) as c:
        if read:
            r = c.post(f"{url}gradio_api/call/long_context", json={"data": data})
            event_id = r.json().get("event_id") if r.status_code == 200 else None
            if event_id:
                try:
                    with c.stream("GET", f"{url}gradio_api/call/long_context/{event_id}", timeout=3.0) as s:
                        end = time.monotonic() + 3.0
                        for _ in s.iter_lines():
                            if time.monotonic() > end:
                                break
                except httpx.HTTPError:
                    pass
        else:
            call(c, url, "long_context", data, read=False)
    left = time.monotonic()
    time.sleep(3.0 if read else 6.0)
    cores = cores_over(pid, 10.0)
    with client("127.0.0.6", timeout=60) as c:
        status, took, text = call(c, url, "long_context", ["", "1024", "heldout", "", "window", "bundled", 8])
    return {
        "server_cores_after": round(cores, 2),
        "since_left_s": round(time.monotonic() - left, 1),
        "next_job": status,
        "next_job_said": text[:120] if status != "complete" else "",
        "next_job_s": round(took, 1),
    }


def start(root: str, extra_env: dict) -> tuple:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "GRADIO_SERVER_NAME": "127.0.0.1",
        "GRADIO_SERVER_PORT": str(port),
        "PYTHONUNBUFFERED": "1",
        "GRADIO_TEMP_DIR": tempfile.mkdtemp(prefix="explorer-fair-"),
        **extra_env,
    }
    env.pop("EXPLORER_CLIENT_ADDRESS", None)
    log = tempfile.NamedTemporaryFile("w", prefix="explorer-fair-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [sys.executable, "app.py"], cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "config", timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.5)
    return proc, url, log.name


def stop(proc) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


SCENARIOS = ("one-address", "four-addresses", "forged-xff", "unread", "abandoned")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(ROOT), help="the checkout whose app.py is served")
    ap.add_argument("--seconds", type=float, default=30.0, help="how long each attack lasts")
    ap.add_argument("--only", nargs="*", choices=SCENARIOS, default=list(SCENARIOS))
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    results: dict = {}
    proc, url, log = start(args.root, {})
    try:
        print(f"server {url} (log {log})", flush=True)
        idle = Victim(url).run_for(min(15.0, args.seconds), gap=0.3)
        results["idle"] = idle.summary()
        print(f"idle: {json.dumps(results['idle'])}", flush=True)
        plans = {
            "one-address": lambda: measured(
                url, proc.pid, args.seconds, lambda: attackers(url, ["127.0.0.2"], 2, args.seconds, costliest)
            ),
            "four-addresses": lambda: measured(
                url,
                proc.pid,
                args.seconds,
                lambda: attackers(url, [f"127.0.0.{i}" for i in range(2, 6)], 8, args.seconds, patching),
            ),
            "unread": lambda: long_context(url, proc.pid, read=False),
            "abandoned": lambda: long_context(url, proc.pid, read=True),
        }
        for name in [n for n in args.only if n in plans]:
            out = plans[name]()
            out["server_alive"] = proc.poll() is None
            results[name] = out
            print(f"{name}: {json.dumps(out)}", flush=True)
    finally:
        stop(proc)
    if "forged-xff" in args.only:
        proc, url, log = start(args.root, {"SPACE_ID": "bench/fairness"})
        try:
            results["forged-xff"] = forged_xff(url)
            print(f"forged-xff: {json.dumps(results['forged-xff'])}", flush=True)
        finally:
            stop(proc)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
