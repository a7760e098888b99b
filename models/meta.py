"""Build a model on the meta device without running its initialisers.

A model built under ``torch.device("meta")`` has every parameter's shape and dtype and no storage:
the footprint, the checkpoint vetting and the loaders read it before anything real is allocated.
Its initialisers (``nn.init.normal_`` and friends) still run, and on the meta device ``normal_``
goes through a decomposition that imports ``torch._dynamo`` on first use: about 1.8 s of a cold
start for numbers that a meta tensor cannot hold anyway. ``on_meta()`` skips every in-place call on
a meta tensor (an initialiser, ``fill_``, ``zero_``, ...) inside the block; the mode is thread-local,
so a real build on another thread is untouched.
"""

from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode


def _target(args, kwargs):
    """The tensor an in-place call writes: its first argument (``nn.init`` passes it as ``tensor=``)."""
    if args:
        return args[0]
    return kwargs.get("tensor", kwargs.get("input", kwargs.get("self")))


class _SkipMetaWrites(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name.endswith("_") and not name.endswith("__"):
            t = _target(args, kwargs)
            if isinstance(t, torch.Tensor) and t.is_meta:
                return t  # a write into a tensor with no storage: nothing to do
        return func(*args, **kwargs)


@contextlib.contextmanager
def on_meta():
    """``with on_meta(): model = build_model(cfg)``: shapes and dtypes only, initialisers skipped."""
    with torch.device("meta"), _SkipMetaWrites():
        yield


def materialize(model: torch.nn.Module, device="cpu") -> torch.nn.Module:
    """``model.to_empty(device=device)`` without its cost: every tensor of a meta-built model replaced by
    uninitialised storage of the same shape and dtype on ``device`` (the caller fills it).

    ``to_empty`` calls ``torch.empty_like`` on each meta tensor, which goes through a Python reference that
    imports ``torch.fx.experimental.symbolic_shapes`` and sympy on first use: 0.3-0.4 s of a cold start
    (the Why tab's cards load a shipped checkpoint as the page is built). ``torch.empty`` with the shape
    and dtype makes the same contiguous tensors without that import."""
    return model._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device=device))
