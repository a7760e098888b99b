"""Heavy work on a public Space: training, reproductions and exports beside interactive requests.

``python -m benchmarks.heavy_load [--limit-as 8G] [--seconds 40] [--parts upload,flood,stop] [--json out.json]`` starts
``python app.py`` on 127.0.0.1 (under an address-space limit when given, standing in for the memory
of a small Space) and drives it through the public API as anonymous visitors would, each from its own
loopback address (``benchmarks.sources``: the app's per-visitor limits see them as distinct visitors):

- **interactive under load**: ``/analyze`` p50 / p95 from one visitor, alone, then while two visitors
  press ``/train_play``, one runs a reproduction and one exports; the ratio is what a visitor feels.
- **hostile requests**: a training press at 8192 tokens of a 12-layer model that builds the full score
  matrix, an uploaded file of 2 kB whose header asks for ~2e9 parameters, and a flood of 26 presses of
  ``/train_play`` from 26 visitors, while another visitor's ``/analyze`` must keep answering. For each:
  what the visitor got back (refused with a message, busy, accepted) and how long it took.
- **stop latency**: seconds from ``/train_pause`` to the end of the running press, the pause sent 8 s
  into the press and 0.3 s into it.
- **disk**: temporary folders left behind by 10 calls of ``/train_download``.

The server's RSS (``/proc/PID/status``) is sampled every 0.2 s; the peak above its idle RSS is printed
for each part. Ends with the ``machine:`` line (``kernels.tools.busy``): figures taken while other processes
used a quarter of a core or more are unstable.
"""

from __future__ import annotations

import argparse
import glob
import itertools
import json
import os
import statistics
import struct
import tempfile
import threading
import time

from benchmarks import sources
from benchmarks.loadtest import rss_bytes
from benchmarks.netcheck import free_port, start_server, stop_server
from kernels.tools.busy import BusyWatch

SMALL_TRAIN = dict(n_layers=2, d_model=64, n_heads=4, max_len=256, position="rope")
HUGE_TRAIN = dict(n_layers=12, d_model=64, n_heads=4, attention="talking_heads", max_len=8192, position="rope")
# ~1.8e9 parameters: under the library's own limit (2e9), so only the app's checks can refuse it
HUGE_UPLOAD = dict(n_layers=9, d_model=4096, n_heads=32, d_ff=16384, vocab_size=256, max_len=1024)
TEXT = "The quick brown fox jumps over the lazy dog. Attention is all you need."


_VISITORS = itertools.count()


def _client(url):
    """A new visitor: a ``gradio_client`` whose connections leave from its own loopback address."""
    from gradio_client import Client

    sources.install()
    return Client(url, verbose=False, headers=sources.headers(sources.address(next(_VISITORS))))


def _outcome(exc: Exception | None, status: str = "") -> str:
    """What a visitor got: from the exception Gradio raised, else from the status text the tab showed."""
    if exc is None:
        low = status.lower()
        if "busy" in low:
            return "busy (message)"
        if "refused" in low or "\u26a0" in status:
            return f"refused (message: {status.strip()[:90]!r})"
        return "accepted"
    text = str(exc)
    if "queue is full" in text.lower():
        return "queue full"
    if "busy" in text.lower():
        return "busy (message)"
    if "is not valid" in text:
        return "refused (message)"
    return f"error: {type(exc).__name__}: {text[:120]}"


class Sampler:
    """The server's RSS every 0.2 s while active: ``peak()`` since the last ``reset()``."""

    def __init__(self, pid: int):
        self.pid, self.top, self.stop = pid, 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            self.top = max(self.top, rss_bytes(self.pid) or 0)
            time.sleep(0.2)

    def reset(self) -> int:
        now, self.top = rss_bytes(self.pid) or 0, 0
        return now

    def peak(self) -> int:
        return self.top


def _play(client, cfg: dict, steps: int = 300, batch: int = 32, seq_len: int = 64, task: str = "copy"):
    return client.submit(
        json.dumps(cfg), task, steps, 3e-3, 30, "cosine", batch, seq_len, 0, "", "trained", api_name="/train_play"
    )


def _analyze_latencies(url: str, seconds: float) -> list:
    client, out, end = _client(url), [], time.time() + seconds
    n = 0
    while time.time() < end:
        cfg = {"attention": "sliding_window", "window": 8 + n % 24, "seed": n}
        t0 = time.perf_counter()
        try:
            client.predict(json.dumps(cfg), TEXT, "=>", api_name="/analyze")
            out.append(time.perf_counter() - t0)
        except Exception:
            out.append(float("inf"))
        n += 1
    return out


def _cancel(job) -> None:
    """Cancel a submitted job; a server too busy to answer the cancel in time is reported, not fatal."""
    try:
        job.cancel()
    except Exception as exc:
        print(f"cancel: {type(exc).__name__}: {str(exc)[:80]}")


def _pcts(values: list) -> tuple:
    finite = sorted(v for v in values if v != float("inf"))
    if not finite:
        return float("nan"), float("nan"), len(values)
    p95 = finite[min(len(finite) - 1, int(round(0.95 * (len(finite) - 1))))]
    return statistics.median(finite), p95, len(values) - len(finite)


def interactive_under_load(url: str, seconds: float) -> dict:
    alone = _analyze_latencies(url, seconds)
    visitors = [_client(url) for _ in range(4)]
    jobs = [
        _play(visitors[0], SMALL_TRAIN, steps=2000),
        _play(visitors[1], SMALL_TRAIN, steps=2000),
        visitors[2].submit("kv_heads", api_name="/train_reproduce"),
    ]
    stop = threading.Event()

    def exports():
        while not stop.is_set():
            try:
                visitors[3].predict(json.dumps({"attention": "bigbird"}), TEXT, "=>", api_name="/export")
            except Exception:
                time.sleep(1)

    t = threading.Thread(target=exports, daemon=True)
    t.start()
    time.sleep(3)  # the heavy work is running
    loaded = _analyze_latencies(url, seconds)
    stop.set()
    for job in jobs:
        _cancel(job)
    t.join(120)
    a50, a95, afail = _pcts(alone)
    l50, l95, lfail = _pcts(loaded)
    return {
        "alone_p50": a50,
        "alone_p95": a95,
        "loaded_p50": l50,
        "loaded_p95": l95,
        "p95_ratio": l95 / a95 if a95 else float("nan"),
        "failed_alone": afail,
        "failed_loaded": lfail,
        "requests": (len(alone), len(loaded)),
    }


def _crafted_upload(path: str) -> None:
    """A valid safetensors file of one tiny tensor whose header's config asks for a huge model (its
    digest is right: only the building of the model can refuse it)."""
    import numpy as np
    import torch

    from explorer.analysis.weights.trained import tensor_digest

    data = np.zeros(4, np.float32)
    meta = {
        "format": "transformer-family-explorer/weights",
        "version": "1",
        "config": json.dumps(HUGE_UPLOAD),
        "sha256": tensor_digest({"x": torch.zeros(4)}),
    }
    header = json.dumps({"__metadata__": meta, "x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})
    header += " " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header.encode() + data.tobytes())


def hostile(url: str, sampler: Sampler, cases=("train8192", "upload", "flood")) -> list:
    rows = []
    client = _client(url)
    if "train8192" in cases:
        base, t0, status = sampler.reset(), time.perf_counter(), ""
        try:
            job = _play(client, HUGE_TRAIN, steps=2, batch=1, seq_len=8192)
            job.result(timeout=600)
            status, exc = str(job.outputs()[-1][0]), None
        except Exception as e:
            exc = e
        rows.append(
            {
                "case": "train at 8192 tokens, 12 layers, talking_heads",
                "outcome": _outcome(exc, status),
                "seconds": time.perf_counter() - t0,
                "peak_mb": (sampler.peak() - base) / 2**20,
            }
        )
    if "upload" in cases:
        path = os.path.join(tempfile.mkdtemp(prefix="heavy-load-"), "crafted.safetensors")
        _crafted_upload(path)
        from gradio_client import handle_file

        base, t0, status = sampler.reset(), time.perf_counter(), ""
        try:
            status, exc = str(client.predict(handle_file(path), api_name="/train_upload")[-1]), None
        except Exception as e:
            exc = e
        rows.append(
            {
                "case": f"upload of {os.path.getsize(path):,} bytes asking for ~1.8e9 parameters",
                "outcome": _outcome(exc, status),
                "seconds": time.perf_counter() - t0,
                "peak_mb": (sampler.peak() - base) / 2**20,
            }
        )
    if "flood" in cases:
        rows.append(flood(url, sampler))
    return rows


def flood(url: str, sampler: Sampler) -> dict:
    """26 visitors press /train_play at once while another visitor's /analyze must keep answering."""
    base, t0 = sampler.reset(), time.perf_counter()
    visitors = [_client(url) for _ in range(26)]
    presses = [_play(v, SMALL_TRAIN, steps=2000) for v in visitors]
    time.sleep(5)
    answered = _analyze_latencies(url, 10)
    outcomes = []
    for job in presses:
        try:
            job.result(timeout=1)
            outs = job.outputs()
            outcomes.append(_outcome(None, str(outs[-1][0]) if outs else "").split(" (message:")[0])
        except Exception as e:
            outcomes.append(_outcome(e) if "Timeout" not in type(e).__name__ else "running / queued")
        _cancel(job)
    p50, p95, failed = _pcts(answered)
    counts = {k: outcomes.count(k) for k in sorted(set(outcomes))}
    return {
        "case": f"26 presses of /train_play: {counts}",
        "outcome": f"/analyze during the flood: {len(answered) - failed} answered, {failed} failed, p95 {p95:.2f} s",
        "seconds": time.perf_counter() - t0,
        "peak_mb": (sampler.peak() - base) / 2**20,
    }


def stop_latency(url: str, after_s: float) -> float:
    """Seconds from ``/train_pause`` (sent ``after_s`` seconds into a long press) to the press's end."""
    client = _client(url)
    job = _play(client, SMALL_TRAIN, steps=2000, batch=64, seq_len=128)
    time.sleep(after_s)
    t0 = time.perf_counter()
    client.predict(api_name="/train_pause")
    while not job.done() and time.perf_counter() - t0 < 300:
        time.sleep(0.05)
    return time.perf_counter() - t0


def download_leftovers(url: str) -> tuple:
    client = _client(url)
    _play(client, SMALL_TRAIN, steps=5).result(timeout=120)
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "train-*")))
    for _ in range(10):
        client.predict(api_name="/train_download")
    left = set(glob.glob(os.path.join(tempfile.gettempdir(), "train-*"))) - before
    size = sum(os.path.getsize(f) for d in left for f in glob.glob(os.path.join(d, "*")))
    return len(left), size


PARTS = ("interactive", "train8192", "upload", "flood", "stop", "download")


def _bytes(text: str | None) -> int | None:
    if not text:
        return None
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().rstrip("b")
    return int(float(t[:-1]) * units[t[-1]]) if t[-1] in units else int(t)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.heavy_load", description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit-as", help="address-space limit of the server it starts (e.g. 8G), as prlimit --as")
    ap.add_argument("--seconds", type=float, default=30.0, help="seconds of /analyze per latency measurement")
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    args = ap.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        ap.error(f"unknown part {unknown[0]!r}; valid: {', '.join(PARTS)}")
    port = free_port()
    log = tempfile.NamedTemporaryFile("w", prefix="heavy-load-", suffix=".log", delete=False)
    proc = start_server(port, log.name, limit_as=_bytes(args.limit_as))
    url = f"http://127.0.0.1:{port}/"
    out = {"limit_as": args.limit_as}
    with BusyWatch() as watch:
        try:
            sampler = Sampler(proc.pid)
            out["idle_rss_mb"] = sampler.reset() / 2**20
            if "interactive" in parts:
                out["interactive"] = interactive_under_load(url, args.seconds)
            cases = [p for p in parts if p in ("train8192", "upload", "flood")]
            if cases:
                out["hostile"] = hostile(url, sampler, cases)
            if "stop" in parts:
                out["stop_s"] = {"after 8 s": stop_latency(url, 8.0), "after 0.3 s": stop_latency(url, 0.3)}
            if "download" in parts:
                out["download_leftovers"] = download_leftovers(url)
            out["server_alive"] = proc.poll() is None
            out["server_peak_rss_mb"] = sampler.top / 2**20
            sampler.stop.set()
        finally:
            stop_server(proc)
    _report(out, args.limit_as, log.name, watch.note())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)


def _report(out: dict, limit_as, log_name: str, machine: str) -> None:
    print(
        f"# heavy load on a public Space (server under RLIMIT_AS={limit_as or 'none'}; idle RSS "
        f"{out['idle_rss_mb']:.0f} MB)"
    )
    i = out.get("interactive")
    if i:
        print(
            f"/analyze alone: p50 {i['alone_p50']:.2f} s, p95 {i['alone_p95']:.2f} s ({i['requests'][0]} requests); "
            f"beside 2 trainings, a reproduction and exports: p50 {i['loaded_p50']:.2f} s, p95 "
            f"{i['loaded_p95']:.2f} s ({i['requests'][1]} requests, {i['failed_loaded']} failed): "
            f"p95 x{i['p95_ratio']:.1f}"
        )
    if out.get("hostile"):
        print("| hostile request | what the visitor got | seconds | server peak above idle (MB) |")
        print("| --- | --- | --- | --- |")
        for r in out["hostile"]:
            print(f"| {r['case']} | {r['outcome']} | {r['seconds']:.1f} | {r['peak_mb']:.0f} |")
    for when, s in (out.get("stop_s") or {}).items():
        print(f"stop latency, pause sent {when} into a press: {s:.2f} s until the press ended")
    if "download_leftovers" in out:
        n, size = out["download_leftovers"]
        print(f"disk: {n} temporary folders ({size / 2**20:.1f} MiB) left by 10 calls of /train_download")
    print(
        f"server alive at the end: {out['server_alive']}; peak RSS {out['server_peak_rss_mb']:.0f} MB; "
        f"server log: {log_name}"
    )
    print(machine)


if __name__ == "__main__":
    main()
