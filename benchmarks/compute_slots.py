"""How many analyses should run at once? ``python -m benchmarks.compute_slots [--requests N] [--json PATH]``

Runs the app's interactive work (the attention maps and the gradient norms of a fresh config, the
caches bypassed by a new seed per request) from 1, 2, 3 and 4 worker threads, one torch thread
each like the app's requests, and prints requests per second and the median latency per level.
The app's compute slots (``EXPLORER_COMPUTE_SLOTS``, ``explorer.runtime.settings``) are the level past which throughput
stops growing while latency keeps rising. Timings are of the machine it runs on, at that moment: on a shared machine,
run it when the machine is quiet and read the ratios rather than the absolute numbers.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from explorer.analysis import attention_maps, gradient_norms
from explorer.app.controls.share import DEFAULT_TEXT
from models import ModelConfig


def _one(seed: int) -> float:
    torch.set_num_threads(1)  # per thread, like the app's requests
    cfg = ModelConfig(seed=seed)
    t0 = time.perf_counter()
    attention_maps(cfg, DEFAULT_TEXT)
    gradient_norms(cfg)
    return time.perf_counter() - t0


def level(workers: int, requests: int, seeds) -> dict:
    lock = threading.Lock()

    def next_seed():
        with lock:
            return next(seeds)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        latencies = list(pool.map(lambda _: _one(next_seed()), range(requests)))
    wall = time.perf_counter() - t0
    return {
        "workers": workers,
        "requests": requests,
        "req_per_s": requests / wall,
        "median_ms": 1000 * statistics.median(latencies),
        "p90_ms": 1000 * sorted(latencies)[int(0.9 * requests) - 1],
    }


def main(argv=None) -> list:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    seeds = itertools.count(1000)
    _one(999)  # process warm-up: lazy imports, first forward
    rows = [level(w, args.requests, seeds) for w in (1, 2, 3, 4)]
    print(f"{'workers':>8} {'req/s':>8} {'median ms':>10} {'p90 ms':>8}")
    for r in rows:
        print(f"{r['workers']:>8} {r['req_per_s']:>8.2f} {r['median_ms']:>10.0f} {r['p90_ms']:>8.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return rows


if __name__ == "__main__":
    main()
