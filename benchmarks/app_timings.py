"""The app's server-side timings: ``python -m benchmarks.app_timings [--json PATH]``.

Prints, on the machine it runs on:
- the server time of ``attention_maps`` + ``gradient_norms`` for the default config (4 layers,
  d_model 128, 4 heads, a 128-byte text), uncached (caches cleared before each run), median of
  several runs, with the app's thread setting; target < 300 ms;
- the app's cold start: launching ``python app.py`` until the server answers; target < 10 s;
- a 6-length forward sweep of the default config up to 4096 tokens; target < 15 s.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from explorer.analysis import attention_maps, clear_caches, gradient_norms
from kernels.tools.busy import BusyWatch

ROOT = Path(__file__).resolve().parent.parent
TEXT = ("The quick brown fox jumps over the lazy dog; attention maps show who looks at whom. " * 2)[:128]


def server_time(runs: int = 7) -> dict:

    from explorer.runtime.device import configure_threads
    from models import ModelConfig

    threads = configure_threads()
    cfg = ModelConfig()
    attention_maps(cfg.replace(seed=1), TEXT)  # process warm-up (first forward, lazy imports)
    gradient_norms(cfg.replace(seed=1))
    times = []
    for _ in range(runs):
        clear_caches()
        t0 = time.perf_counter()
        attention_maps(cfg, TEXT)
        gradient_norms(cfg)
        times.append(time.perf_counter() - t0)
    return {
        "median_ms": 1000 * statistics.median(times),
        "min_ms": 1000 * min(times),
        "runs": runs,
        "threads": threads,
        "tokens": len(TEXT.encode()),
    }


def cold_start(timeout: float = 120.0) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "GRADIO_SERVER_NAME": "127.0.0.1",
        "GRADIO_SERVER_PORT": str(port),
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        while time.perf_counter() - t0 < timeout:
            if proc.poll() is not None:
                raise RuntimeError(f"app.py exited with code {proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/config", timeout=1) as r:
                    if r.status == 200:
                        return {"seconds": time.perf_counter() - t0}
            except OSError:
                time.sleep(0.1)
        return {"seconds": None, "error": f"no answer within {timeout} s"}
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def sweep_time() -> dict:
    from explorer.analysis import latency_memory_sweep
    from explorer.analysis.cost.sweep import DEFAULT_LENGTHS
    from models import ModelConfig

    t0 = time.perf_counter()
    records = latency_memory_sweep(ModelConfig(), DEFAULT_LENGTHS, "forward")
    return {"seconds": time.perf_counter() - t0, "records": records}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    with BusyWatch() as watch:
        cold = cold_start()  # first, while nothing else of ours is running
        server = server_time()
        sweep = sweep_time()
    rows = [
        (
            "attention_maps + gradient_norms (default config, uncached)",
            f"{server['median_ms']:.0f} ms",
            "< 300 ms",
            f"median of {server['runs']}, {server['threads']} thread(s), {server['tokens']} tokens",
        ),
        (
            "app cold start (python app.py -> server answers)",
            f"{cold['seconds']:.1f} s" if cold.get("seconds") else cold.get("error"),
            "< 10 s",
            "",
        ),
        (
            "6-length forward sweep up to 4096 (default config)",
            f"{sweep['seconds']:.1f} s",
            "< 15 s",
            ", ".join(f"{r['seq_len']}:{r['status']}" for r in sweep["records"]),
        ),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'measurement':<{width}}  {'result':>9}  {'target':>9}  notes")
    for name, result, target, note in rows:
        print(f"{name:<{width}}  {result:>9}  {target:>9}  {note}")
    print("\nsweep records (ms, measured peak bytes, backend):")
    for r in sweep["records"]:
        ms = f"{r['ms']:.1f}" if r["ms"] else "-"
        print(f"  L={r['seq_len']:>5}  {r['status']:<8} {ms:>9} ms  {r['peak_bytes'] or 0:>12,d} B  {r['backend']}")
    print(watch.note())
    result = {"server": server, "cold_start": cold, "sweep": sweep, "machine_busy": watch.busy}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
