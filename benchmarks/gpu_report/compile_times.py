"""Compile section (CUDA only, run first): every specialisation compiled for this GPU, then first calls.

1. Every kernel specialisation kernels.tools.aot_check lists, compiled ahead of time for this GPU's
   compute capability into a fresh Triton cache, one process per core
   (``kernels.tools.aot_check.compile_job``): seconds, registers, spill bytes and shared memory per
   variant (cuobjdump on the cubin, as aot_check). The rest of the report then runs with this cache
   as its ``TRITON_CACHE_DIR``.
2. The app's variants (first_call.py), each in a fresh subprocess: with an empty cache (first call =
   compile + run, against the second call), and with the cache step 1 filled ahead of time: is it
   hit (no new cache entries, first call close to the second)? A miss means the launcher's
   specialisations differ from aot_check's and every cold start compiles in the request.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

import torch

from .writer import md_table

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def aot_for_this_gpu(device, quick, deadline, cache: str) -> list[dict]:
    """Compile every specialisation for this GPU into ``cache``; pending jobs are cancelled past
    ``deadline`` (the running ones finish)."""
    from kernels.tools.aot_check import all_specs, compile_job

    major, minor = torch.cuda.get_device_capability(device)
    cc = major * 10 + minor
    jobs = [
        (name, (fn.fn.__module__, fn.fn.__name__), ptrs, consts, w, st, cc)
        for name, fn, ptrs, consts, w, st in all_specs(quick)
    ]
    rows = []
    old = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = cache  # inherited by the workers
    try:
        # spawn, not fork: this process has initialised CUDA, a forked child must not inherit it
        with ProcessPoolExecutor(
            max_workers=max(1, min(16, os.cpu_count() or 1)), mp_context=multiprocessing.get_context("spawn")
        ) as pool:
            futures = [pool.submit(compile_job, job) for job in jobs]
            for fut in as_completed(futures):
                if fut.cancelled():
                    continue
                name, cc_, smem, regs, stack, sec, cpu, err = fut.result()
                rows.append(
                    {
                        "kernel": name,
                        "sm": cc_,
                        "smem": smem,
                        "regs": regs,
                        "spill_bytes": stack,
                        "seconds": round(sec, 2),
                        "error": err,
                    }
                )
                if time.monotonic() > deadline:
                    for f in futures:
                        f.cancel()
    finally:
        if old is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = old
    skipped = len(jobs) - len(rows)
    rows.sort(key=lambda r: r["kernel"])
    if skipped:
        rows.append(
            {
                "kernel": f"({skipped} more not compiled: time budget)",
                "sm": cc,
                "smem": -1,
                "regs": -1,
                "spill_bytes": -1,
                "seconds": 0.0,
                "error": "skipped: time budget",
            }
        )
    return rows


def _count_files(path) -> int:
    return sum(len(files) for _, _, files in os.walk(path))


def first_call_run(cache: str, timeout_s: float) -> dict:
    """first_call.py in a fresh subprocess with ``TRITON_CACHE_DIR=cache``."""
    env = {**os.environ, "TRITON_CACHE_DIR": cache}
    env.pop("TRITON_INTERPRET", None)
    before = _count_files(cache)
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_report.first_call"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if p.returncode != 0:
        raise RuntimeError(f"first_call failed: {p.stderr[-600:]}")
    return {
        "calls": json.loads(p.stdout.strip().splitlines()[-1]),
        "new_cache_files": _count_files(cache) - before,
        "process_seconds": round(time.perf_counter() - t0, 1),
    }


AOT_SHARE = 0.35  # at most this share of the budget goes to the ahead-of-time compile


def run(device, quick=False, deadline=float("inf"), log=print) -> tuple[dict, str]:
    if torch.device(device).type != "cuda":
        return (
            {
                "status": "skipped",
                "reason": "needs CUDA; without a GPU `python -m kernels.tools.aot_check` "
                "compiles every specialisation for sm_80 / sm_90",
            },
            "skipped on CPU: `python -m kernels.tools.aot_check` compiles every specialisation for sm_80 / sm_90 "
            "without a GPU",
        )
    t0 = time.perf_counter()
    data, md = {"status": "ok"}, []
    cache = tempfile.mkdtemp(prefix="gpu_report_triton_cache_")  # filled ahead of time, then used by the report
    aot_deadline = min(deadline, time.monotonic() + AOT_SHARE * max(0.0, deadline - time.monotonic()))
    aot = aot_for_this_gpu(device, quick, aot_deadline, cache)
    os.environ["TRITON_CACHE_DIR"] = cache  # the rest of the report (and its JIT launches) use it
    data["aot"], data["cache_dir"] = aot, cache
    done = [r for r in aot if r["regs"] >= 0 or (r["error"] and "time budget" not in r["error"])]
    spilling = [r for r in done if r["spill_bytes"] > 0]
    failed = [r for r in done if r["error"]]
    md += [
        f"{len(done)} specialisations compiled ahead of time for this GPU, {len(failed)} failed, "
        f"{len(spilling)} spill (total {sum(r['seconds'] for r in done):.0f} compile-seconds on "
        f"{min(16, os.cpu_count() or 1)} processes):",
        "",
        md_table(
            ["kernel", "sm", "regs", "spill B", "smem", "s", "error"],
            [
                [r["kernel"], r["sm"], r["regs"], r["spill_bytes"], r["smem"], r["seconds"], r["error"] or ""]
                for r in aot
            ],
        ),
    ]
    log(f"  compile: {len(done)} specialisations, {len(failed)} failed, {len(spilling)} spill")
    runs = {}
    with tempfile.TemporaryDirectory(prefix="gpu_report_cold_cache_") as empty:
        for label, where in (("empty cache", empty), ("cache filled ahead of time", cache)):
            left = deadline - time.monotonic()
            if left < 20:
                runs[label] = "skipped: time budget"
                continue
            try:
                runs[label] = first_call_run(where, timeout_s=left)
            except Exception as e:  # noqa: BLE001 - recorded; the report goes on
                runs[label] = f"error: {type(e).__name__}: {str(e)[:300]}"
    data["first_calls"] = runs
    cold, warm = runs.get("empty cache"), runs.get("cache filled ahead of time")
    if isinstance(cold, dict) and isinstance(warm, dict):
        hit = warm["new_cache_files"] == 0
        data["prefilled_cache_hit"] = hit
        rows = [
            [name, f"{c['first_s']:.2f}", f"{c['second_s'] * 1e3:.1f}", f"{warm['calls'][name]['first_s']:.3f}"]
            for name, c in cold["calls"].items()
        ]
        md += [
            "",
            f"First calls of the app's variants (forward + backward, fresh subprocesses). With the cache "
            f"filled ahead of time the run wrote {warm['new_cache_files']} new cache files: "
            f"**{'hit' if hit else 'MISSED'}**.",
            "",
            md_table(["variant", "empty cache: first call s", "second call ms", "prefilled cache: first call s"], rows),
        ]
    else:
        md += ["", f"first calls: {runs}"]
    data["seconds"] = time.perf_counter() - t0
    return data, "\n".join(md)
