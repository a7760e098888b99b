"""The Train tab's reproductions: the stored run at once, a live run one press away, a timeline.

Picking a reproduction shows its stored run (``explorer.training.reproductions.stored``: the last full
run, with the machine, date and commit it ran on): reading, figure, table, and for ``induction`` and
``warmup`` a timeline slider over its snapshots (maps, curves, gradient norms at that step; the phase
change marked). **Run live on this machine** recomputes it as a heavy job of the "reproduce" family and
overlays the live curves on the stored ones; the timeline then steps through the live run. While it
runs, the panel shows a bar of its elapsed time against its measured duration, its latest progress
lines and, for the reproductions that train curves, the held-out loss so far (``Point`` progress).

A reproduction is fixed work (no visitor sets its sizes): its ``COST`` (wall time and peak memory,
measured by ``python -m benchmarks.repro_costs``) is what the page tells the visitor to expect and
what the job holds in the server's memory pool while it runs. It runs in a low-priority worker thread
(``explorer.app.server.jobs``) with the job's stop as the ambient stop (``explorer.runtime.stopping``): Stop,
a cancelled event or a client that left end it inside the current training step.
"""

from __future__ import annotations

import time
from contextlib import aclosing

import gradio as gr
import pandas as pd

from explorer.app.server.jobs import HEAVY, stream_job, visitor_of
from explorer.app.server.messages import shown_problem
from explorer.app.tabs.parts.train_inputs import choice
from explorer.figures import training as plots_train
from explorer.figures.gradients import PLACEMENT_COLORS
from explorer.runtime.pool import POOL
from explorer.runtime.stopping import Abandoned, stop_when
from explorer.runtime.untrusted import shown
from explorer.training import reproductions
from explorer.training.reproductions import stored as stored_runs
from models import ConfigError

TIMELINE_OUT = ("slider", "timeline")


def _table(mod, result) -> pd.DataFrame:
    return pd.DataFrame(mod.table_rows(result), columns=mod.COLUMNS)


def _text(mod, result, head: str) -> str:
    return f"**{mod.TITLE}** · {head}\n\n{result['reading']}\n\n" + "\n\n".join(
        f"`{line}`" for line in mod.extra_lines(result)
    )


def slider_args(result) -> dict:
    """The timeline slider's settings for ``result``: its snapshot steps, at the last one; hidden without."""
    steps = plots_train.timeline_steps(result)
    if not steps:
        return dict(visible=False, value=0)
    gap = steps[1] - steps[0] if len(steps) > 1 else 1
    return dict(
        visible=True,
        minimum=steps[0],
        maximum=steps[-1],
        step=gap,
        value=steps[-1],
        label=f"Timeline: step (snapshots every {gap} steps; drag to see the run at that step)",
    )


def slider_update(result) -> dict:
    return gr.update(**slider_args(result))


def show_stored(name):
    """-> (reading, figure, table, slider, timeline, live=None) of the stored run of ``name``."""
    try:
        name = choice("reproduction", name, list(reproductions.REPRODUCTIONS))
    except ConfigError as exc:
        return f"⚠️ {shown(str(exc))}", gr.skip(), gr.skip(), gr.skip(), gr.skip(), None
    mod, record = reproductions.REPRODUCTIONS[name], stored_runs.load(name)
    if record is None:
        return (
            f"**{mod.TITLE}**: no stored run yet; press **Run live on this machine** ({expected(name)}).",
            None,
            None,
            gr.update(visible=False),
            None,
            None,
        )
    steps = plots_train.timeline_steps(record)
    return (
        _text(mod, record, stored_runs.provenance(record)),
        plots_train.repro_figure(record),
        _table(mod, record),
        slider_update(record),
        plots_train.timeline_figure(record, steps[-1]) if steps else None,
        None,
    )


def show_step(name, step, live):
    """The timeline figure at ``step`` of the live run when there is one for ``name``, else the stored run."""
    result = (
        live
        if isinstance(live, dict) and live.get("name") == name
        else stored_runs.load(str(name))
        if name in reproductions.REPRODUCTIONS
        else None
    )
    try:
        step = int(float(step or 0))
    except (TypeError, ValueError):
        step = 0
    return plots_train.timeline_figure(result, step)


def expected(name: str) -> str:
    """ "about 4 min" of the reproduction's measured wall time on two CPU cores."""
    seconds = reproductions.REPRODUCTIONS[name].COST.seconds
    return f"about {seconds:.0f} s" if seconds < 90 else f"about {seconds / 60:.0f} min"


LOG_LINES = 4  # the live run's latest progress lines shown under its bar
REDRAW_S = 1.0  # the live curves are redrawn at most this often (seconds)
BAR = 20  # cells of the text progress bar


def running_line(name: str, elapsed: float, log: list) -> str:
    """The live run's status: a bar of the elapsed time against the measured duration (an estimate,
    said as one), what the figure shows meanwhile, and the latest progress lines."""
    total = reproductions.REPRODUCTIONS[name].COST.seconds
    done = min(0.99, elapsed / max(total, 1e-9))
    cells = int(done * BAR)
    bar = "▰" * cells + "▱" * (BAR - cells)
    lines = "\n".join(f"- {line}" for line in log)  # escaped Markdown: no code span, where escapes show
    return (
        f"⏳ Running **{name}** live: `{bar}` {elapsed:.0f} s of {expected(name)} (measured on two CPU "
        "cores; press **Stop** to end it). The figure shows the stored run until the live one draws "
        "over it." + (f"\n\n{lines}" if lines else "")
    )


def choices_info() -> str:
    return "Measured on two CPU cores: " + ", ".join(f"{n} {expected(n)}" for n in reproductions.REPRODUCTIONS)


SKIP3 = (gr.skip(), gr.skip(), gr.skip())


async def run_reproduction(name, state, request: gr.Request = None):
    """Async generator of ``(state, reading, figure, table, slider, timeline, live)``: progress lines, then
    the live result overlaid on the stored run."""
    state = dict(state or {})
    try:
        name = choice("reproduction", name, list(reproductions.REPRODUCTIONS))
    except ConfigError as exc:
        yield state, f"⚠️ {shown(str(exc))}", gr.skip(), gr.skip(), *SKIP3
        return
    mod = reproductions.REPRODUCTIONS[name]

    def work(should_stop, emit):
        def progress(msg):
            if should_stop():
                raise Abandoned("stopped")
            emit(("progress", msg))

        with POOL.reserve(mod.COST.peak_bytes, f"the {name} reproduction", wait_s=0), stop_when(should_stop):
            result = reproductions.run(name, progress=progress)
        emit(("result", result))

    start, log, points, drawn = time.monotonic(), [], {}, 0.0
    try:
        async with aclosing(stream_job("reproduce", request, work, first=("progress", ""))) as items:
            async for kind, value in items:
                if kind == "progress":
                    if value:
                        log = [*log, shown(value)][-LOG_LINES:]
                    if isinstance(value, reproductions.Point):
                        points.setdefault(value.series, []).append((value.step, value.value))
                    now = time.monotonic()
                    line = running_line(name, now - start, log)
                    if not value and not log:  # the start: the stored run, said to be the stored one
                        _, figure, table, slider, timeline, _ = show_stored(name)
                        yield state, line, figure, table, slider, timeline, None
                    elif points and now - drawn >= REDRAW_S:  # the curves so far, at most once a REDRAW_S
                        drawn = now
                        yield (
                            state,
                            line,
                            plots_train.live_curves_figure(points, name, PLACEMENT_COLORS),
                            gr.skip(),
                            *SKIP3,
                        )
                    else:
                        yield state, line, gr.skip(), gr.skip(), *SKIP3
                    continue
                record = stored_runs.load(name)
                figure = plots_train.repro_figure(value)
                head = f"live run: {value['wall_s']:.0f} s on this machine"
                if record is not None:
                    figure = plots_train.overlay(figure, plots_train.repro_figure(record))
                    head += f" (dashed: the {stored_runs.provenance(record)})"
                steps = plots_train.timeline_steps(value)
                yield (
                    state,
                    _text(mod, value, head),
                    figure,
                    _table(mod, value),
                    slider_update(value),
                    plots_train.timeline_figure(value, steps[-1]) if steps else gr.skip(),
                    value,
                )
    except Abandoned:
        yield state, f"■ {name}: stopped.", gr.skip(), gr.skip(), *SKIP3
    except ConfigError as exc:  # busy
        yield state, f"⚠️ {shown(str(exc))}", gr.skip(), gr.skip(), *SKIP3
    except Exception as exc:  # never a traceback or an internal message on the page
        yield state, f"⚠️ {name}: {shown_problem(exc)}", gr.skip(), gr.skip(), *SKIP3


def stop_reproduction(state, request: gr.Request = None):
    """Stop the visitor's running reproduction (inside its current step)."""
    HEAVY.stop(visitor_of(request), {"reproduce"})
    return state
