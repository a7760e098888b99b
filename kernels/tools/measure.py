"""Measured (never computed) memory and wall time of a piece of work, on CPU and CUDA.

Time: ``median_ms`` (one closure) and ``interleaved_ms`` (several, round-robin). On CUDA each run
is timed with CUDA events recorded on the current stream around it (``torch.cuda.Event``, GPU
time of the queued work, no host-side launch jitter) after a synchronisation; on CPU with
``time.perf_counter``. ``timer_name(device)`` says which, for the tables and plots.

CUDA: ``torch.cuda.max_memory_allocated`` after a reset, minus what was allocated before.
CPU: the PyTorch profiler's allocator events (``[memory]`` records, one per allocation and free,
including kernels' internal temporaries); the running sum of their sizes in time order is the live
memory the work allocated, and its maximum is the peak. Tensors that existed before the call
(weights, inputs) are not counted.

The profiler's own log lines (``USDT: ... profiler_start`` / ``profiler_stop`` on stderr, two per
measurement) would fill a benchmark's output and a server's log, so this module sets Kineto's log
threshold above every level (``KINETO_LOG_LEVEL=6``) unless the environment already sets one. Kineto
reads it when the first profiler starts, so it holds for any process that imports this module first.
"""

from __future__ import annotations

import os
import time

import torch

os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # Kineto's levels are 0 (verbose) to 5 (USDT): 6 is none


def _cpu_peak(fn):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        if not str(e.device_type()).endswith("CPU"):
            continue
        live += e.nbytes()
        peak = max(peak, live)
    return result, peak


def measure_peak(fn, device="cpu"):
    """Run ``fn()`` once; return ``(result, peak_bytes)`` allocated by it (label: "measured")."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        result = fn()
        torch.cuda.synchronize(device)
        return result, torch.cuda.max_memory_allocated(device) - before
    return _cpu_peak(fn)


def synchronizer(device):
    """A no-argument call that waits for ``device``'s queued work (nothing to wait for on CPU)."""
    device = torch.device(device)
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


def timer_name(device) -> str:
    """What times a run on ``device``: "CUDA events" or "perf_counter (wall clock)"."""
    return "CUDA events" if torch.device(device).type == "cuda" else "perf_counter (wall clock)"


def timed_s(fn, device="cpu") -> float:
    """Seconds one ``fn()`` takes: CUDA events on CUDA (queued work drained first), else wall time."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median_ms(fn, device="cpu", warmup=1, repeats=5, budget_s=None):
    """Median time of ``fn()`` in ms after ``warmup`` calls (``timed_s``: CUDA events on CUDA).

    With ``budget_s``, stops repeating once the total time spent exceeds it (at least one timed run).
    """
    sync = synchronizer(device)
    for _ in range(warmup):
        fn()
    sync()
    times, spent = [], 0.0
    for _ in range(repeats):
        dt = timed_s(fn, device)
        times.append(dt)
        spent += dt
        if budget_s is not None and spent > budget_s:
            break
    times.sort()
    return 1000.0 * times[len(times) // 2]


def interleaved_ms(runs: list, device, repeats: int, budget_s: float) -> list:
    """Median ms of each closure, timed round-robin: repeat ``r`` of every closure runs before
    repeat ``r + 1`` of any, so a slow spell of a shared machine hits all of them alike instead of
    whichever happened to be measured then. A closure stops repeating once its total time exceeds
    ``budget_s`` (it always gets one timed run)."""
    times = [[] for _ in runs]
    for _ in range(repeats):
        for run, ts in zip(runs, times):
            if ts and sum(ts) > budget_s:
                continue
            ts.append(timed_s(run, device))
    return [1000.0 * sorted(ts)[len(ts) // 2] for ts in times]
