"""Long jobs of the app: the latency sweep (cancellable) and the export (leaves no files behind).

Handlers take control values by name and return ``{output name: value}`` like ``ui_handlers``.
"""
from __future__ import annotations

import asyncio
import threading


from explorer.runtime.load import LOAD


def client_gone_probe():
    """A no-argument check: has the browser / client of the running event gone away?

    Gradio marks a running event's job not ``alive`` when its client's event stream closes
    (``queueing.clean_events``) but neither cancels the task nor offers a public accessor, so this
    reads that flag defensively (any surprise means "still connected"). Must be created in the
    event's context (it reads Gradio's per-event context variables)."""
    try:
        from gradio.context import LocalContext
        blocks, event_id = LocalContext.blocks.get(None), LocalContext.event_id.get(None)
    except Exception:
        return lambda: False
    if blocks is None or event_id is None:
        return lambda: False

    def gone() -> bool:
        try:
            for job_set in blocks._queue.active_jobs:
                for job in job_set or []:
                    if getattr(job, "_id", None) == event_id:
                        return not job.alive
        except Exception:
            return False
        return False
    return gone


async def cancellable(work):
    """Run ``work(should_stop)`` in a worker thread; ``should_stop()`` turns True when the event is
    cancelled (``job.cancel()``, the Stop button) or its client disconnects. The event (and so its
    concurrency slot) ends only once the worker has stopped, so the next job starts at once."""
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


