"""What each reproduction costs on this machine: wall time and peak memory, measured in a fresh process.

``python -m benchmarks.repro_costs [NAME ...] [--quick]`` runs each reproduction (all by default) in
its own Python process, as the Train tab runs it (one intra-op thread), and prints its wall time and
the growth of the process's peak resident memory over its resident memory once everything is
imported (``ru_maxrss``). These are the figures behind each reproduction's ``COST`` (what the app tells
a visitor to expect and what it reserves in the server's memory pool); rerun after changing one.
Ends with the ``machine:`` line: times taken while other processes used the cores are too long.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from kernels.tools.busy import BusyWatch

CHILD = r"""
import json, resource, sys, time
from explorer.training import reproductions
from benchmarks.loadtest import rss_bytes
import os
base = rss_bytes(os.getpid())
t0 = time.perf_counter()
reproductions.run(sys.argv[1], quick=sys.argv[2] == "1", threads=1)
wall = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"wall_s": wall, "peak_growth": max(0, peak - base)}))
"""


def measure(name: str, quick: bool) -> dict | None:
    """The child's figures, or None (its error's last lines printed) when the reproduction failed."""
    out = subprocess.run([sys.executable, "-c", CHILD, name, "1" if quick else "0"], capture_output=True, text=True)
    if out.returncode != 0:
        print(f"| {name} | failed: {' / '.join(out.stderr.strip().splitlines()[-3:])} | | |", flush=True)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    from explorer.training.reproductions import REPRODUCTIONS

    ap = argparse.ArgumentParser(prog="python -m benchmarks.repro_costs", description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help=f"reproductions (default: all of {', '.join(REPRODUCTIONS)})")
    ap.add_argument("--quick", action="store_true", help="the quick settings (tests), not the app's")
    args = ap.parse_args(argv)
    names = args.names or list(REPRODUCTIONS)
    unknown = [n for n in names if n not in REPRODUCTIONS]
    if unknown:
        ap.error(f"unknown reproduction {unknown[0]!r}; valid: {', '.join(REPRODUCTIONS)}")
    print("| reproduction | wall time (s) | peak memory growth (MiB) | in the module |")
    print("| --- | --- | --- | --- |")
    with BusyWatch() as watch:
        for name in names:
            r = measure(name, args.quick)
            if r is None:
                continue
            print(
                f"| {name} | {r['wall_s']:.0f} | {r['peak_growth'] / 2**20:.0f} | "
                f"COST = Cost(seconds={r['wall_s']:.0f}, peak_bytes={int(r['peak_growth'])}) |",
                flush=True,
            )
    print(watch.note())


if __name__ == "__main__":
    main()
