"""Pooled attention maps of the default bundle at long lengths on this CPU: time and peak memory.

    python -m benchmarks.long_context [--threads N] [--cases sw16k,full4k,full16k] [--json out.json]

Each case runs ``models.long_context.pooled_maps`` on the bundled model 'default' (4 layers x 4 heads
= 16 heads, RoPE, trained at 1024 bytes): one forward of the whole model at ``L`` tokens with the
pooled pass of every layer (``kernels.pooled_attention``, 256 x 256 cells per head, per-query
statistics) and the per-token loss. ``sw16k`` runs the same weights with a 64-key sliding window
(surgery: the pattern has no parameters of its own). The text is the held-out part of the bundles'
corpus (``explorer.runtime.corpus``), the same bytes on every run. Printed: the whole call's seconds
(the model's forward at ``L`` included: at 16k tokens it is most of the time) and, apart, the seconds
inside the pooled kernels; each also as the process's CPU seconds, which other processes on the cores do
not inflate.

Targets (the issue's, on this 2-core CPU): sliding_window(64) at 16384 <= 2 s, full at 4096 <= 1.5 s,
full at 16384 <= 15 s. Memory is measured: the peak rise of the process's resident set over the
call, sampled every 5 ms by a thread reading /proc/self/statm (labelled as such), beside what one
layer's dense L x L probabilities would take (a formula, for scale only). The machine's load average
is printed with the figures, and the last line says how much CPU other processes used meanwhile
(``machine:``, ``kernels.tools.busy.BusyWatch``): the targets assume a quiet core, so a target missed
while the machine was busy reads "NO (busy)".
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

import torch

from kernels.tools.busy import BusyWatch

CASES = {"sw16k": ("sliding_window", 16384, 2.0), "full4k": ("full", 4096, 1.5), "full16k": ("full", 16384, 15.0)}


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRSS:
    """``with PeakRSS() as p: ...`` -> ``p.rise``: peak resident bytes over the block minus those at entry."""

    def __enter__(self):
        self.start = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())
        self.rise = self.peak - self.start


def text_tokens(L: int) -> torch.Tensor:
    """``(1, L)`` byte ids of the held-out part of the bundles' corpus (the Python documentation the
    bundles were not trained on), repeated up to ``L`` if it is shorter."""
    from explorer.runtime.corpus import python_docs, split_corpus

    data = split_corpus(python_docs())[1]
    reps = -(-L // len(data))
    return torch.tensor(list((data * reps)[:L]), dtype=torch.long)[None]


def bundle_model(attention: str):
    from explorer.analysis.weights.bundled import load
    from models import ModelConfig, build_model

    bundle = load("default")
    if attention == bundle.config.attention:
        return bundle.model()
    cfg = ModelConfig.from_dict({**bundle.config.to_dict(), "attention": attention, "window": 64})
    model = build_model(cfg)
    model.load_state_dict(bundle.state, strict=True)  # a pattern adds no parameters: same weights
    return model.eval()


class _Timed:
    """``models.long_context``'s kernel entry points wrapped to add up the seconds spent inside them."""

    def __init__(self):
        import models.long_context as lc

        self.lc, self.seconds, self.cpu_seconds = lc, 0.0, 0.0
        self.saved = {n: getattr(lc, n) for n in ("pooled_attention", "pooled_linear")}

    def __enter__(self):
        for name, fn in self.saved.items():
            setattr(self.lc, name, self._wrap(fn))
        return self

    def _wrap(self, fn):
        def timed(*a, **kw):
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*a, **kw)
            finally:
                self.seconds += time.perf_counter() - t0
                self.cpu_seconds += time.process_time() - c0

        return timed

    def __exit__(self, *exc):
        for name, fn in self.saved.items():
            setattr(self.lc, name, fn)


def run_case(name: str) -> dict:
    from models.long_context import pooled_maps

    attention, L, target = CASES[name]
    model = bundle_model(attention)
    tokens = text_tokens(L)
    pooled_maps(model, tokens[:, :256])  # warm-up: imports, kernels' first calls (not the long layouts)
    with BusyWatch() as busy, PeakRSS() as mem, _Timed() as kernels:
        t0, c0 = time.perf_counter(), time.process_time()
        res = pooled_maps(model, tokens)
        seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    heads = sum(m.mass.shape[1] for m in res.maps)
    dense_layer = model.cfg.n_heads * L * L * 4
    return {
        "case": name,
        "attention": attention,
        "L": L,
        "heads": heads,
        "seconds": round(seconds, 3),
        "pooled_pass_s": round(kernels.seconds, 3),
        "cpu_s": round(cpu_seconds, 3),
        "pooled_cpu_s": round(kernels.cpu_seconds, 3),
        "target_s": target,
        "met": seconds <= target,
        "busy": busy.busy,  # other work beside this case: its times include waiting for it
        "peak_rss_rise_mb": round(mem.rise / 2**20, 1),
        "cells": list(res.maps[0].mass.shape[-2:]),
        "backend": res.maps[0].backend,
        "method": res.method,
        "mean_loss_nats": round(float(res.loss.mean()), 4),
        "dense_probs_one_layer_mb_formula": round(dense_layer / 2**20),
    }


def met_label(met: bool, busy: bool) -> str:
    """The "met" column: a target missed while other work ran says so (the targets assume a quiet core)."""
    return "yes" if met else "NO (busy)" if busy else "NO"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma list of {list(CASES)}")
    ap.add_argument("--json", default=None, help="also write the records here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average before: "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"{'case':8s} {'pattern':15s} {'L':>6s} {'heads':>5s} {'seconds':>8s} {'pooled':>7s} {'cpu s':>6s} "
        f"{'pooled':>7s} {'target':>7s} {'met':>9s} "
        f"{'peak RSS rise':>14s} {'cells':>9s}  backend"
    )
    records = []
    with BusyWatch() as watch:
        for name in [c.strip() for c in args.cases.split(",") if c.strip()]:
            if name not in CASES:
                print(f"unknown case {name!r}: one of {list(CASES)}")
                return 2
            r = run_case(name)
            records.append(r)
            print(
                f"{r['case']:8s} {r['attention']:15s} {r['L']:6d} {r['heads']:5d} {r['seconds']:8.2f} "
                f"{r['pooled_pass_s']:7.2f} {r['cpu_s']:6.2f} {r['pooled_cpu_s']:7.2f} {r['target_s']:7.1f} "
                f"{met_label(r['met'], r['busy']):>9s} {r['peak_rss_rise_mb']:11.1f} MB "
                f"{'x'.join(map(str, r['cells'])):>9s}  {r['backend']}  (loss {r['mean_loss_nats']} nats/byte; "
                f"one layer's dense L x L probabilities would be {r['dense_probs_one_layer_mb_formula']} MB)",
                flush=True,
            )
        print(
            f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; seconds: the whole "
            "pooled_maps call (model forward at L, layouts, pooled pass of every layer, loss); pooled: inside the "
            "pooled kernels only; cpu s: this process's CPU seconds over the same spans (all its threads; what "
            "the other processes on the cores do not inflate, unlike the wall-clock seconds); peak RSS rise: "
            "resident set sampled every 5 ms over the call, minus its value at the start"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=2))
    print(watch.note())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
