"""The queue's order and the start-up check, made fair and patient (installed by ``build_app``).

- Every slot group of Gradio's queue starts its waiting events by ``explorer.runtime.fair.pick``: per-address
  queues served in turn, and beyond the group's slots up to ``settings.guest_slots()`` more, each for an
  address with nothing running that is within its share (``gradio_compat.fair_queue``). So with four
  addresses sending everything their caps allow, a fifth visitor's request starts at once instead of after
  theirs.
- ``launch()``'s check of its own address waits for a busy server instead of exiting
  (``gradio_compat.patient_self_check``).
- A connection that sends no whole request head within ``HEADER_S`` is closed (``gradio_compat.header_timeout``;
  a request body that stops arriving for ``request_limits.BODY_IDLE_S`` is answered 408 there).
"""

from __future__ import annotations

from explorer.app.server import visitors
from explorer.app.server.gradio_compat import fair_queue, header_timeout, patient_self_check
from explorer.runtime import fair, settings

HEADER_S = 20.0  # seconds a new connection may take to send its first request head


def _address(request) -> str:
    return visitors.of_request(request) or visitors.UNKNOWN


def choose(waiting: list, running: dict, limit: int | None) -> int | None:
    """The waiting event to start now (``fair.pick`` with the guest slots and the share rule)."""
    return fair.pick(waiting, running, limit, settings.guest_slots(), lambda a: not fair.over_share(a))


def install_queue(queue) -> None:
    """Fair order in Gradio's ``queue`` (idempotent)."""
    fair_queue(queue, _address, choose)


def install(demo) -> None:
    """Fair order in ``demo``'s queue and a patient start-up check (idempotent)."""
    install_queue(demo._queue)
    patient_self_check()
    header_timeout(HEADER_S)
