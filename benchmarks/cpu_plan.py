"""What planning costs the CPU path, and what memoising the plan saves: ``python -m benchmarks.cpu_plan``.

A model calls ``kernels.attention`` once per layer with the same (memoised) ``BlockMask``. The CPU
path derives an execution plan from the layout (``kernels/cpu/plan.py``); that plan is memoised on
the mask, so a model pays for it once per layout, not once per layer and call. This script
measures, for a model-like loop (``--layers`` attention calls per forward, same mask, ``B = 1``,
``--heads`` heads of ``--head-dim``), at each length:

    plan ms        building the plan of one layout (what every call used to pay)
    replan ms      one forward planning every call (a fresh copy of the mask per call, which is
                   what ``BlockMask.to`` returned before it returned the mask itself)
    memo ms        one forward with the plan memoised (planned once, before timing)
    saved          replan - memo (compare with layers x plan ms: the memo also keeps the fused
                   windows' additive masks, which re-planning rebuilt every call)

Times are medians of round-robin runs (``kernels.tools.measure.interleaved_ms``), forward only, no
autograd, on ``--threads`` threads. Patterns are built like the model's (causal AND, 64 x 64 tiles)
with ``block_mask_from_rows``: ``sliding_window`` (``|i - j| < window``) and ``longformer`` (the
window plus ``n_global`` global tokens).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import torch

from kernels import attention, block_mask_from_rows
from kernels.cpu.plan import build_plan
from kernels.tools.busy import BusyWatch
from kernels.tools.measure import interleaved_ms


def _rows(pattern: str, window: int, n_global: int):
    """``rows(a, b) -> bool [b - a, L]`` of a causal pattern (the model ANDs causality in)."""

    def rows(a, b, L):
        i = torch.arange(a, b)[:, None]
        j = torch.arange(L)[None, :]
        allowed = (i - j).abs() < window
        if pattern == "longformer":
            allowed = allowed | (i < n_global) | (j < n_global)
        return allowed & (j <= i)

    return rows


def _fresh(bm):
    """The same layout with empty memos: what every layer got before ``to()`` returned ``self``."""
    return dataclasses.replace(bm, plans={}, copies={})


def measure(L: int, pattern: str, args) -> dict:
    rows = _rows(pattern, args.window, args.n_global)
    bm = block_mask_from_rows(lambda a, b: rows(a, b, L), L, L, args.block)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, args.heads, L, args.head_dim, generator=g) for _ in range(3))

    def replan():
        for _ in range(args.layers):
            attention(q, k, v, block_mask=_fresh(bm))

    def memo():
        for _ in range(args.layers):
            attention(q, k, v, block_mask=bm)

    def plan_once():
        build_plan(bm, L, L, q.device)

    with torch.no_grad():
        memo()  # warm-up, and plans bm once
        budget = args.budget_s
        plan_ms, replan_ms, memo_ms = interleaved_ms([plan_once, replan, memo], "cpu", args.repeats, budget)
    return {
        "L": L,
        "pattern": pattern,
        "layers": args.layers,
        "visited_blocks": bm.n_visited,
        "plan_ms": plan_ms,
        "replan_forward_ms": replan_ms,
        "memo_forward_ms": memo_ms,
        "saved_ms": replan_ms - memo_ms,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    ap.add_argument("--patterns", nargs="+", default=["sliding_window"], choices=["sliding_window", "longformer"])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--n-global", type=int, default=2)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--budget-s", type=float, default=3.0, help="stop repeating a closure after this much time")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="also write the rows to this JSON file")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(
        f"CPU, {args.threads} thread(s), fp32, B=1, h={args.heads}, d_h={args.head_dim}, window={args.window}, "
        f"{args.layers} attention calls per forward, {args.block}x{args.block} tiles; medians of round-robin runs"
    )
    head = f"{'pattern':<15}{'L':>7}{'plan ms':>10}{'x layers':>10}{'replan ms':>12}{'memo ms':>10}{'saved':>9}"
    print(head)
    print("-" * len(head))
    out = []
    with BusyWatch() as watch:
        for pattern in args.patterns:
            for L in args.lengths:
                t0 = time.perf_counter()
                r = measure(L, pattern, args)
                out.append(r)
                print(
                    f"{pattern:<15}{L:>7}{r['plan_ms']:>10.2f}{r['plan_ms'] * args.layers:>10.2f}"
                    f"{r['replan_forward_ms']:>12.2f}"
                    f"{r['memo_forward_ms']:>10.2f}{r['saved_ms']:>9.2f}   ({time.perf_counter() - t0:.0f} s)"
                )
    print(watch.note())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
