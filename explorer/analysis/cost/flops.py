"""Count the FLOPs of the torch ops that run inside a block: ``with FlopCount(custom) as c: ...; c.total``.

The formulas are ``torch.utils.flop_counter``'s (the registry of its ``FlopCounterMode``: matmuls,
convolutions, the attention kernels, plus ``custom``: ``{op: formula(*shapes, **kwargs)}``), and the
counting follows that mode op for op: an op is first offered its decomposition (a composite op is
counted through the ops it is made of), then run and counted by its formula if it has one. So the
total is ``FlopCounterMode(custom_mapping=custom).get_total_flops()`` (``tests`` compare the two).

Why not ``FlopCounterMode`` itself: every ``TorchDispatchMode`` subclass gets its
``__torch_dispatch__`` wrapped in ``torch._disable_dynamo``, which imports ``torch._dynamo`` (and
sympy: about 1.5 s) on its first call, and the model card is on the page's first paint. The wrap
keeps ``torch.compile`` from tracing into the mode; nothing is compiled inside this block, so this
mode opts out (``_should_skip_dynamo``). It keeps no per-module table, only the total.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

# size / stride queries: answered by the tensor itself, never counted (as in FlopCounterMode)
_QUERIES = {
    aten.sym_is_contiguous.default,
    aten.is_contiguous.default,
    aten.is_contiguous.memory_format,
    aten.is_strides_like_format.default,
    aten.is_non_overlapping_and_dense.default,
    aten.size.default,
    aten.sym_size.default,
    aten.stride.default,
    aten.sym_stride.default,
    aten.storage_offset.default,
    aten.sym_storage_offset.default,
    aten.numel.default,
    aten.sym_numel.default,
    aten.dim.default,
    torch.ops.prim.layout.default,
}


class FlopCount(TorchDispatchMode):
    """``total``: the FLOPs counted so far by ``torch.utils.flop_counter``'s formulas (and ``custom``)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # no torch._disable_dynamo wrap: it would import torch._dynamo (see the module doc)

    def __init__(self, custom: dict | None = None):
        from torch.utils.flop_counter import FlopCounterMode

        super().__init__()
        # the registry with ``custom``'s formulas wrapped as FlopCounterMode wraps them (shapes, not tensors)
        self.registry = FlopCounterMode(display=False, custom_mapping=custom).flop_registry
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _QUERIES:
            return NotImplemented
        # as FlopCounterMode: the registry is keyed by op packets and ``func`` is an overload, so
        # every op is first offered its decomposition (None for ops with a kernel of their own)
        if func not in self.registry and func is not torch.ops.prim.device.default:
            with self:
                r = func.decompose(*args, **kwargs)
                if r is not NotImplemented:
                    return r
        out = func(*args, **kwargs)
        formula = self.registry.get(func._overloadpacket)
        if formula is not None:
            self.total += formula(*args, **kwargs, out_val=out)
        return out
