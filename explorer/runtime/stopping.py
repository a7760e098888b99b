"""Stopping work inside a forward or backward pass, not only between them.

A ``Guard`` installed on a model checks, before every module's forward and (with gradients) at every
module's input gradient in the backward pass, whether its caller asked to stop or its deadline passed,
and raises ``Abandoned`` there. So a stop, a pause, a client that left or a time budget ends the work
within one module's run (a fraction of a second for the explorer's sizes), whatever the length of the
pass: the sweep abandons a timed run this way and the trainer an optimizer step.

``stop_when(should_stop)`` makes ``should_stop`` the *ambient* stop of the enclosed work (a context
variable: per thread and per task, never shared between visitors): code that runs many trainings
(a reproduction) needs no stop argument threaded through it, ``Trainer.run`` and ``check_stop()``
read it. The first ``stop_when`` also installs one process-wide forward pre-hook on every module
(``torch.nn.modules.module.register_module_forward_pre_hook``) that calls ``check_stop()``: so every forward
pass of every analysis (each pass of a Why view, each layer of a long context, each figure of an export)
is abandoned between two modules once its caller stops, without a check threaded into the analysis. Work
outside ``stop_when`` (the start-up paint, tests) pays one context-variable read per module; work inside a
``Guard`` is left to the guard, which tells a stop from a time-out.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import time

import torch


class Abandoned(Exception):
    """Raised from a hook to abandon a run: the deadline passed or the caller stopped it."""


_AMBIENT: contextvars.ContextVar = contextvars.ContextVar("explorer_stop", default=None)
_WATCH = {"handle": None}  # the one global forward pre-hook, once installed (never per visitor)
GUARDED = "_explorer_guards"  # on a module: how many Guards are installed on it now


def _every_module(module, _args):
    if not getattr(module, GUARDED, 0):  # a Guard's own hooks check (and tell why they stopped) there
        check_stop()


def watch_every_module() -> None:
    """Install (once) the forward pre-hook on every module that checks the ambient stop."""
    if _WATCH["handle"] is None:
        _WATCH["handle"] = torch.nn.modules.module.register_module_forward_pre_hook(_every_module)


@contextlib.contextmanager
def stop_when(should_stop):
    """``should_stop`` is the ambient stop of the enclosed work (see the module docstring)."""
    watch_every_module()
    token = _AMBIENT.set(should_stop)
    try:
        yield
    finally:
        _AMBIENT.reset(token)


def ambient_stop():
    """The ambient stop (a no-argument callable), or None outside ``stop_when``."""
    return _AMBIENT.get()


def check_stop() -> None:
    """Raise ``Abandoned`` when the ambient stop says so (nothing outside ``stop_when``)."""
    stop = _AMBIENT.get()
    if stop is not None and stop():
        raise Abandoned("cancelled")


class Guard:
    """Abandons the current pass between two modules once its deadline passed or ``stopped()``."""

    def __init__(self, stopped):
        self.stopped = stopped
        self.deadline = math.inf
        self.why = None
        self.entered = 0  # module forwards the installed guard let through (how far a run got)

    def check(self) -> None:
        if self.stopped():
            self.why = "cancelled"
            raise Abandoned("cancelled")
        if time.perf_counter() > self.deadline:
            self.why = "timeout"
            raise Abandoned("timeout")

    @contextlib.contextmanager
    def run_until(self, seconds: float):
        """A deadline ``seconds`` from now for the enclosed work."""
        self.deadline, self.why = time.perf_counter() + seconds, None
        try:
            yield
        finally:
            self.deadline = math.inf

    @contextlib.contextmanager
    def installed(self, model, backward: bool = True):
        """Hooks on every module of ``model`` for the enclosed work (``backward``: in the backward pass too)."""

        def pre_hook(_module, args):
            self.check()
            self.entered += 1
            if backward:  # the backward pass passes through the same point again
                for a in args:
                    if isinstance(a, torch.Tensor) and a.requires_grad:
                        a.register_hook(self._grad_hook)
                        break

        modules = list(model.modules())
        handles = [m.register_forward_pre_hook(pre_hook) for m in modules]
        for m in modules:  # a marker on the module, not in a context: a generator may resume in another one
            m.__dict__[GUARDED] = m.__dict__.get(GUARDED, 0) + 1
        try:
            yield self
        finally:
            for m in modules:
                m.__dict__[GUARDED] = max(0, m.__dict__.get(GUARDED, 1) - 1)
            for hd in handles:
                hd.remove()

    def _grad_hook(self, grad):
        self.check()
        return grad
