"""The Long context tab's default scene on this machine: seconds per view and bytes per redraw.

    python -m benchmarks.long_context_view [--lengths 1024,4096,16384] [--threads 1]

For each length: the bundled model 'default' (full attention, RoPE, trained at 128 bytes) as trained and
under a 64-key sliding window (the same weights), on held-out documentation, through the view's own
call (``explorer.analysis.long_context.view.long_context``: the passage, both forwards with the pooled pass of
every layer, the loss) and the tab's figures (``explorer.figures.long_context``). Printed: the view's
seconds (both sides), the figures' seconds, the JSON bytes of the grid, the loss and the statistics
figures (what one redraw sends), each side's mean loss, and the machine's load average (other processes
on the cores slow every number down). The app runs one thread per request (``EXPLORER_THREADS``).
"""

from __future__ import annotations

import argparse
import os
import time

import torch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="1024,4096,16384")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the app's default: 1)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from explorer.analysis import source
    from explorer.analysis.long_context.view import long_context
    from explorer.figures.long_context import loss_figure, pooled_grid, stats_figure
    from models import ModelConfig

    src = source.resolve("bundled", ModelConfig())
    long_context(src, 1024, "heldout")  # warm-up: imports, layouts, first kernel calls
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"{'L':>6s} {'view s':>7s} {'figures s':>9s} {'grid kB':>8s} {'loss kB':>8s} {'stats kB':>8s}  mean loss "
        "(as trained | 64-key window)"
    )
    for L in [int(x) for x in args.lengths.split(",") if x.strip()]:
        t0 = time.perf_counter()
        r = long_context(src, L, "heldout")
        view = time.perf_counter() - t0
        t0 = time.perf_counter()
        sizes = [len(f.to_json()) / 1000 for f in (pooled_grid(r), loss_figure(r), stats_figure(r, 0))]
        figs = time.perf_counter() - t0
        means = " | ".join(f"{float(s.loss.mean()):.3f}" for s in r.sides)
        print(f"{L:6d} {view:7.2f} {figs:9.2f} {sizes[0]:8.1f} {sizes[1]:8.1f} {sizes[2]:8.1f}  {means}", flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
