"""Training in GPU bursts: a run's steps as a series of short GPU calls, each returning to the CPU.

``run_in_bursts(trainer)`` drives ``Trainer.run`` one snapshot interval (``run.every`` steps) per GPU
call, ``train_burst``: the trainer (model, optimizer, generators, history: all picklable) is moved to
the call's device, trains, and comes back to the CPU with the burst's snapshots. On a ZeroGPU Space
the call's arguments and result are pickled, so the caller's trainer ``adopt``\\ s the copy that comes
back; elsewhere the call changes the trainer in place. Each burst asks for the GPU for the seconds it
may use (``duration``: the run's wall time left, at most ``BURST_S``), so a long run never holds a GPU
for minutes, and a stop (the caller's ``stop``, or the ambient stop of ``explorer.runtime.stopping``)
crosses into the burst as a ``StopToken``. The snapshots are those of one uninterrupted ``run`` (its
pause / resume is exact), on any device.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from explorer.runtime.device import device, gpu
from explorer.runtime.signals import stop_channel
from explorer.runtime.stopping import Abandoned, ambient_stop
from explorer.training.trainer import Trainer

BURST_S = 60.0  # seconds of GPU one burst asks for at most: one snapshot interval of the app's runs is far less


def _burst_duration(trainer, steps, stop, max_wall_s=None) -> int:
    return int(math.ceil(30 + (BURST_S if max_wall_s is None else min(BURST_S, max(0.0, float(max_wall_s))))))


@gpu(duration=_burst_duration)
def train_burst(trainer: Trainer, steps: int, stop, max_wall_s: float | None = None) -> tuple:
    """Up to ``steps`` more steps of ``trainer`` on the call's device -> ``(trainer, snapshots)``, the
    trainer back on the CPU. ``stop``: a ``StopToken``; ``max_wall_s``: the seconds left of the run's
    wall-time cap (None: no cap)."""
    trainer.to(device())
    try:
        snaps = list(trainer.run(max_steps=int(steps), stop=stop, max_wall_s=max_wall_s))
    finally:
        trainer.to("cpu")
    return trainer, snaps


def run_in_bursts(
    trainer: Trainer,
    stop: Callable[[], bool] | None = None,
    max_wall_s: float | None = None,
    every: int | None = None,
):
    """``trainer.run(stop=..., max_wall_s=...)`` as GPU bursts of ``every`` steps (default ``run.every``):
    yields the same snapshots. Without ``stop`` the ambient stop applies and, as in ``Trainer.run``, a
    stop of the enclosing work raises ``Abandoned`` instead of ending with a snapshot."""
    ambient = stop is None and ambient_stop() is not None
    should_stop = stop or ambient_stop()
    every = int(every or trainer.run_cfg.every)
    start = time.perf_counter()
    with stop_channel(should_stop) as token:
        while True:
            left = None if max_wall_s is None else max_wall_s - (time.perf_counter() - start)
            back, snaps = train_burst(trainer, every, token, left)
            trainer.adopt(back)
            for snap in snaps:  # a burst's snapshots come together: the enclosing work may have stopped since
                if ambient and should_stop():
                    raise Abandoned("cancelled")
                yield snap
            if trainer.done or not snaps or snaps[-1].message:
                return
