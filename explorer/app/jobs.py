"""Work that outlives a quick request: run in a worker thread, stopped when nobody wants it.

``cancellable(work)`` runs ``work(should_stop)`` in a worker thread; ``should_stop()`` turns True when
the event is cancelled (``job.cancel()``, a Stop button) or its client disconnects
(``gradio_compat.client_gone_probe``). The event, and so its concurrency slot, ends only once the
worker has stopped, so the next job starts at once and never runs beside an abandoned one.
"""
from __future__ import annotations

import asyncio
import threading

from explorer.app.gradio_compat import client_gone_probe
from explorer.runtime.load import LOAD


async def cancellable(work):
    """``await`` the result of ``work(should_stop)`` run in a worker thread (see the module docstring)."""
    stop = threading.Event()
    gone = client_gone_probe()

    def run():
        with LOAD.busy():
            return work(lambda: stop.is_set() or gone())

    task = asyncio.ensure_future(asyncio.to_thread(run))  # to_thread keeps Gradio's context (progress)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        stop.set()
        await asyncio.wait({task})
        raise
