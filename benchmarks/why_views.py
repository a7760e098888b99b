"""Seconds per view of the Why tab on this CPU: the landing text on the default bundle, as a page or an API
call computes it (``explorer.analysis.why.answers``: tokens, budget check, memory pool, the analysis, its JSON;
the figure drawn from it), the memo emptied before each run so nothing is reused.

``python -m benchmarks.why_views [--repeats 3]`` prints the median of ``--repeats`` per view (one thread, as
the app runs, after a warm-up that builds the model) and the ``machine:`` line (was anything else running).
"""

from __future__ import annotations

import argparse
import statistics
import time

from explorer.analysis import source
from explorer.analysis.common.memo import CACHE, eval_model
from explorer.analysis.why import answers as wv
from explorer.analysis.why import head_labels as wh
from explorer.figures import interpretability as figs
from explorer.runtime.configs import app_config
from explorer.runtime.device import configure_threads
from explorer.runtime.text import DEFAULT_TEXT
from kernels.tools.busy import BusyWatch


def timed(fn, repeats: int, keep) -> float:
    times = []
    for _ in range(repeats):
        CACHE.clear()
        keep()  # the model stays built: a view's cost, not the first paint's
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    configure_threads()
    src = source.resolve("bundled", app_config(""))
    keep = lambda: eval_model(src.config, src.weights)  # noqa: E731
    heads = wh.default_heads(src.config)
    views = {
        "logit lens + figure": lambda: figs.lens_figure(wv.lens(src, DEFAULT_TEXT)),
        "attribution + figure": lambda: figs.attribution_figure(wv.attribution(src, DEFAULT_TEXT)),
        "zero ablation of layer 1": lambda: wv.ablation(src, DEFAULT_TEXT, heads, "zero"),
        "mean ablation of layer 1": lambda: wv.ablation(src, DEFAULT_TEXT, heads, "mean"),
        "patching grid + figure": lambda: figs.patching_figure(wv.patching(src, DEFAULT_TEXT)),
        "circuits + figures": lambda: figs.copying_figure(wv.circuits(src, DEFAULT_TEXT)["copying"]),
    }
    print(
        f"default bundle ({src.config.n_layers} layers x {src.config.n_heads} heads), landing text "
        f"({len(DEFAULT_TEXT.encode())} bytes), median of {args.repeats}:"
    )
    with BusyWatch() as busy:
        for label, fn in views.items():
            fn()  # warm-up
            print(f"  {label:28s} {timed(fn, args.repeats, keep):.3f} s")
    print(busy.note())


if __name__ == "__main__":
    main()
