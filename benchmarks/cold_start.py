"""The app's cold start, by phase: ``python -m benchmarks.cold_start [--runs N] [--json PATH]``.

Each run is a fresh ``python`` process that does what a Space does when it wakes: ``import app``
(which builds the whole page, the default config's figures included). The process times, with both
its CPU clock (``time.process_time``: what the work costs, whatever else the machine runs) and the
wall clock:

- ``torch``: ``import torch``; ``gradio``: ``import gradio`` (the two libraries, not ours; gradio as the app
  imports it, without its type-stub writer: ``explorer.app.server.gradio_import``);
- ``our_imports``: importing ``explorer`` (the app's modules, with ``models`` and ``kernels``);
- ``build``: the rest of ``import app`` (``gc.freeze()`` and ``build_app()``), split into
  ``analyses`` (the first paint's results: the ``*_outputs`` functions of the page's tabs, less the
  figures they draw), ``figures`` (time inside ``explorer.figures`` functions and Plotly's
  serialisation, wherever the build calls them) and ``blocks`` (the rest: Gradio's components,
  events and routes, the Train tab's build);
- ``ours``: everything after ``import gradio`` (``our_imports`` + the build); target <= 2 s CPU.

It also says whether ``torch._dynamo`` got imported (with sympy, over 1 s of CPU, and the first
paint has no use for it). The median of the runs is printed per phase. On a busy machine the wall
times grow with the load; the CPU times much less.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("torch", "gradio", "our_imports", "analyses", "figures", "blocks", "build", "ours", "total")
TARGET_S = 2.0  # CPU seconds of "ours"


def _clocks() -> tuple:
    return time.process_time(), time.perf_counter()


class _Timer:
    """Accumulates the time spent inside the wrapped functions (outermost call only, per clock);
    ``within``: another timer; the part of this one's time spent inside its calls is kept apart too."""

    def __init__(self, within: _Timer | None = None):
        self.cpu = self.wall = 0.0
        self.inside_cpu = self.inside_wall = 0.0
        self.depth = 0
        self.within = within

    def wrap(self, fn):
        import functools

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            self.depth += 1
            if self.depth == 1:
                c0, w0 = _clocks()
            try:
                return fn(*args, **kwargs)
            finally:
                if self.depth == 1:
                    c1, w1 = _clocks()
                    self.cpu += c1 - c0
                    self.wall += w1 - w0
                    if self.within is not None and self.within.depth > 0:
                        self.inside_cpu += c1 - c0
                        self.inside_wall += w1 - w0
                self.depth -= 1

        return timed


def _wrap_module(module, timer: _Timer, names=None) -> None:
    """Wrap the functions ``module`` defines (or those it holds under ``names``) in place: callers
    that import them afterwards, and the module's own calls through its globals, go through the timer."""
    import inspect

    for name, obj in list(vars(module).items()):
        if not inspect.isfunction(obj):
            continue
        if (name in names) if names is not None else obj.__module__ == module.__name__:
            setattr(module, name, timer.wrap(obj))


def child() -> dict:
    """One cold start, in this (fresh) process -> ``{phase: {"cpu": s, "wall": s}}``."""
    import gc

    gc.disable()  # as app.py's start-up (page/start.py): it runs without the cyclic collector (on again once built)
    marks = {"start": _clocks()}
    import torch  # noqa: F401

    marks["torch"] = _clocks()
    # isort: off  (the order is what is measured: explorer.app first, as app.py, so gradio skips its stub writer)
    import gradio  # noqa: F401

    import explorer.app  # noqa: F401
    # isort: on

    marks["gradio"] = _clocks()

    import importlib
    import pkgutil

    import explorer.figures

    analyses = _Timer()
    figures = _Timer(within=analyses)
    for info in pkgutil.walk_packages(explorer.figures.__path__, "explorer.figures."):
        _wrap_module(importlib.import_module(info.name), figures)
    _wrap_module(explorer.figures, figures)
    import plotly.basedatatypes

    plotly.basedatatypes.BaseFigure.to_json = figures.wrap(plotly.basedatatypes.BaseFigure.to_json)

    from explorer.app.tabs import attention, gradients, latency, model, surgery

    _wrap_module(attention, analyses, {"attention_outputs"})  # the tabs' first paint (Tab.build)
    _wrap_module(gradients, analyses, {"gradients_outputs"})
    _wrap_module(model, analyses, {"model_outputs"})
    _wrap_module(latency, analyses, {"kv_cache_bytes"})
    _wrap_module(surgery, analyses, {"surgery_outputs"})
    marks["our_imports"] = _clocks()

    fig_before = (figures.cpu, figures.wall)  # figures drawn while importing (none expected)
    import app  # noqa: F401  (builds the page: what a Space does on waking)

    marks["build"] = _clocks()

    def span(a, b):
        return {"cpu": marks[b][0] - marks[a][0], "wall": marks[b][1] - marks[a][1]}

    build = span("our_imports", "build")
    fig = {"cpu": figures.cpu - fig_before[0], "wall": figures.wall - fig_before[1]}
    out = {
        "torch": span("start", "torch"),
        "gradio": span("torch", "gradio"),
        "our_imports": span("gradio", "our_imports"),
        "build": build,
        "figures": fig,
        "ours": span("gradio", "build"),
        "total": span("start", "build"),
    }
    # the analyses' own time: inside the *_outputs functions, less the figures they drew there
    out["analyses"] = {"cpu": analyses.cpu - figures.inside_cpu, "wall": analyses.wall - figures.inside_wall}
    out["blocks"] = {k: build[k] - out["analyses"][k] - fig[k] for k in ("cpu", "wall")}
    out["dynamo_imported"] = "torch._dynamo" in sys.modules
    return out


def run_once(timeout: float = 300.0) -> dict:
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.cold_start", "--child"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"cold start failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summarise(runs: list) -> dict:
    med = {p: {k: statistics.median(r[p][k] for r in runs) for k in ("cpu", "wall")} for p in PHASES}
    return {
        "runs": runs,
        "median": med,
        "target_cpu_s": TARGET_S,
        "ours_within_target": med["ours"]["cpu"] <= TARGET_S,
        "dynamo_imported": any(r["dynamo_imported"] for r in runs),
    }


def print_table(summary: dict) -> None:
    runs = summary["runs"]
    print(f"cold start of `import app`, {len(runs)} fresh processes (seconds; CPU = process_time, wall = perf_counter)")
    head = "".join(f"  run {i + 1:<8}" for i in range(len(runs)))
    print(f"{'phase':<14}{head}  {'median':>14}")
    labels = {
        "torch": "torch import",
        "gradio": "gradio import",
        "our_imports": "our imports",
        "analyses": "  analyses",
        "figures": "  figures",
        "blocks": "  blocks",
        "build": "build_app",
        "ours": "ours",
        "total": "total",
    }
    for p in PHASES:
        cells = "".join(f"  {r[p]['cpu']:5.2f}/{r[p]['wall']:5.2f} " for r in runs)
        m = summary["median"][p]
        print(f"{labels[p]:<14}{cells}  {m['cpu']:6.2f}/{m['wall']:6.2f}")
    m = summary["median"]["ours"]["cpu"]
    print(
        f"ours (CPU, median): {m:.2f} s, target <= {TARGET_S:.1f} s: "
        f"{'met' if summary['ours_within_target'] else 'NOT met'}; "
        f"torch._dynamo imported: {summary['dynamo_imported']}"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="fresh processes (default 5)")
    ap.add_argument("--json", metavar="PATH", help="write the runs and medians as JSON")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child()))
        return 0
    runs = []
    for i in range(max(1, args.runs)):
        runs.append(run_once())
        print(
            f"run {i + 1}/{args.runs}: ours {runs[-1]['ours']['cpu']:.2f} s CPU, {runs[-1]['ours']['wall']:.2f} s wall",
            file=sys.stderr,
        )
    summary = summarise(runs)
    print_table(summary)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
