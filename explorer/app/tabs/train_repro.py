"""The Train tab's reproductions: one button each, a heavy job of the "reproduce" family.

A reproduction is fixed work (no visitor sets its sizes): its ``COST`` (wall time and peak memory,
measured by ``python -m benchmarks.repro_costs``) is what the page tells the visitor to expect and
what the job holds in the server's memory pool while it runs. It runs in a low-priority worker thread
(``explorer.app.jobs``) with the job's stop as the ambient stop (``explorer.runtime.stopping``): Stop,
a cancelled event or a client that left end it inside the current training step.
"""
from __future__ import annotations

from contextlib import aclosing

import gradio as gr
import pandas as pd

from explorer.app.jobs import HEAVY, stream_job, visitor_of
from explorer.app.messages import problem
from explorer.app.tabs.train_inputs import choice
from explorer.figures import training as plots_train
from explorer.runtime.pool import POOL
from explorer.runtime.stopping import Abandoned, stop_when
from explorer.runtime.untrusted import shown
from explorer.training import reproductions
from models import ConfigError


def expected(name: str) -> str:
    """"about 4 min" of the reproduction's measured wall time on two CPU cores."""
    seconds = reproductions.REPRODUCTIONS[name].COST.seconds
    return f"about {seconds:.0f} s" if seconds < 90 else f"about {seconds / 60:.0f} min"


def choices_info() -> str:
    return "Measured on two CPU cores: " + ", ".join(f"{n} {expected(n)}" for n in reproductions.REPRODUCTIONS)


async def run_reproduction(name, state, request: gr.Request = None):
    """Async generator of ``(state, reading, figure, table)``: progress lines, then the result."""
    state = dict(state or {})
    try:
        name = choice("reproduction", name, list(reproductions.REPRODUCTIONS))
    except ConfigError as exc:
        yield state, f"⚠️ {shown(str(exc))}", gr.skip(), gr.skip()
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

    running = f"Running **{name}** … ({expected(name)} on two CPU cores)"
    try:
        async with aclosing(stream_job("reproduce", request, work, first=("progress", ""))) as items:
            async for kind, value in items:
                if kind == "progress":
                    yield state, f"{running}\n\n{shown(value)}" if value else running, gr.skip(), gr.skip()
                    continue
                table = pd.DataFrame(mod.table_rows(value), columns=mod.COLUMNS)
                text = (f"**{mod.TITLE}** · {value['wall_s']:.0f} s on this machine\n\n{value['reading']}\n\n"
                        + "\n\n".join(f"`{line}`" for line in mod.extra_lines(value)))
                yield state, text, plots_train.repro_figure(value), table
    except Abandoned:
        yield state, f"■ {name}: stopped.", gr.skip(), gr.skip()
    except ConfigError as exc:  # busy
        yield state, f"⚠️ {shown(str(exc))}", gr.skip(), gr.skip()
    except Exception as exc:  # never a traceback or an internal message on the page
        yield state, f"⚠️ {name}: {shown(problem(exc))}", gr.skip(), gr.skip()


def stop_reproduction(state, request: gr.Request = None):
    """Stop the visitor's running reproduction (inside its current step)."""
    HEAVY.stop(visitor_of(request), {"reproduce"})
    return state
