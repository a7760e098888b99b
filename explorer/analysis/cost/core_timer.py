"""The attention's own time inside a model's forward: what the sweep draws beside the whole model's time.

The *core* of an attention layer (``models.blocks.Attention.core``, built from the attention registry) takes
the projected, position-modified q, k, v and returns the heads' outputs: the call to ``kernels.attention``
of a structured pattern or full attention, or a mechanism's own code. Timing it inside the model's own
forward, rather than a separate call on random q, k, v, measures exactly the attention the whole-model
time contains: the model's head sizes, position modifiers and pattern layout. Projections, FFNs, norms
and the output head are excluded; an encoder-decoder's cross-attention (``models.encdec``) has no core
and is not counted, its self-attention layers are.

A pre- and a post-hook on each core mark the time: ``perf_counter`` on the CPU (a few microseconds per
layer against milliseconds of attention), CUDA events recorded on the stream on CUDA (the host does not
wait inside the forward; ``seconds()`` waits for the last event).
"""

from __future__ import annotations

import time

import torch

from models.blocks import Attention


class CoreTimer:
    """Time spent inside the attention cores of ``model`` during a forward (module docstring, ``attn_ms``):
    a pre- and a post-hook on each ``models.blocks.Attention.core``; ``reset()`` before a run, ``seconds()``
    after it (on CUDA it waits for the events it recorded)."""

    def __init__(self, model, dev):
        self.cuda = torch.device(dev).type == "cuda"
        self.cores = [m.core for m in model.modules() if isinstance(m, Attention)]
        self.spans, self.handles = [], []

    def __bool__(self) -> bool:
        return bool(self.cores)

    def _mark(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def __enter__(self):
        for core in self.cores:
            self.handles.append(core.register_forward_pre_hook(lambda *_a: self.spans.append([self._mark()])))
            self.handles.append(core.register_forward_hook(lambda *_a: self.spans[-1].append(self._mark())))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def reset(self) -> None:
        self.spans = []

    def seconds(self) -> float:
        done = [s for s in self.spans if len(s) == 2]
        if self.cuda:
            if done:
                done[-1][1].synchronize()
            return sum(a.elapsed_time(b) for a, b in done) / 1000.0
        return sum(b - a for a, b in done)
