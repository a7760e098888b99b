"""``main``: the sections in order, each written to disk when it ends (package docstring)."""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

from . import correctness, env, speed, syncs, targets
from .writer import Report

DEFAULT_BUDGET_S = 450.0  # the issue's 8 minutes, less start-up and the compile subprocesses' tail


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_report", description=__doc__)
    ap.add_argument("--out", default="gpu_report", help="directory for gpu_report.json / gpu_report.md")
    ap.add_argument("--quick", action="store_true", help="fewer lengths and repeats in the speed section")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=DEFAULT_BUDGET_S,
        help="wall-clock seconds; timed cells past it are marked skipped",
    )
    ap.add_argument(
        "--sections",
        default="environment,compile,correctness,syncs,speed,targets",
        help="comma list of sections to run",
    )
    return ap.parse_args(argv)


def main(argv=None, log=None) -> int:
    args = parse_args(argv)
    log = log or (lambda *a: print(*a, file=sys.stderr, flush=True))
    gpu = torch.cuda.is_available()
    device = torch.device("cuda" if gpu else "cpu")
    interp = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    if not gpu and not interp:
        log("gpu_report: no CUDA and TRITON_INTERPRET is not set: run it as `python -m benchmarks.gpu_report`")
        return 2
    mode = "GPU" if gpu else "CPU (Triton interpreter, small shapes, no speed section)"
    report = Report(
        args.out,
        {
            "device": torch.cuda.get_device_name() if gpu else "cpu",
            "mode": mode,
            "quick": args.quick,
            "argv": sys.argv[1:],
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        },
    )
    deadline = time.monotonic() + args.budget_s
    wanted = [s.strip() for s in args.sections.split(",") if s.strip()]
    results = {}
    for name in wanted:
        log(f"gpu_report: section {name} ({report.elapsed():.0f} s elapsed)")
        t0 = time.perf_counter()
        try:
            if name == "environment":
                data, md = env.run(device)
            elif name == "correctness":
                data, md = correctness.run(device, log=log)
            elif name == "syncs":
                data, md = syncs.run(device)
            elif name == "speed":
                data, md = speed.run(device, quick=args.quick, deadline=deadline, log=log)
            elif name == "compile":
                from . import compile_times

                data, md = compile_times.run(device, quick=args.quick, deadline=deadline, log=log)
            elif name == "targets":
                data, md = targets.run(results)
            else:
                raise ValueError(f"unknown section {name!r}")
        except Exception as e:  # noqa: BLE001 - a section that crashes is recorded, the rest still run
            data, md = {"status": "error", "error": f"{type(e).__name__}: {e}"}, f"**error**: {type(e).__name__}: {e}"
        data.setdefault("seconds", time.perf_counter() - t0)
        results[name] = data
        report.section(name, data, md)
    report.finish()
    counts = results.get("correctness", {}).get("counts", {})
    log(
        f"gpu_report: done in {report.elapsed():.0f} s; correctness {counts}; wrote {report.json_path} and "
        f"{report.md_path}"
    )
    return 1 if counts.get("FAILED") else 0
