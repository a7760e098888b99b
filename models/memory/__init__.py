"""Memory (docs/catalogue.md section 7): what the model carries from one segment to the next.

The input is processed in segments of ``segment_len`` (memories that carry state: ``xl``,
``compressive``, ``knn``, ``knn_lm``, ``spalm``). Whatever is carried lives in an explicit,
immutable :class:`MemoryState` that the caller passes in and gets back::

    out = model(tokens, state=state)   # state=None starts fresh (same as model.new_state())
    state = out.state                  # pass it to the next call; never mutated in place

Modules hold parameters only, so two users (two states) never see each other's memory; "reset"
is passing ``state=None`` (or ``model.new_state()``). Every stored tensor is detached.

Modules, each ending with ``VARIANTS`` (``MEMORY`` gathers them in dropdown order):
- ``base.py``: ``MemoryState``, the ``Memory`` base class, ``none``.
- ``segments.py``: ``xl`` (Transformer-XL) and ``compressive`` (Compressive Transformer).
- ``knn.py``: ``knn`` (Memorizing Transformer, a retrieval layer).
- ``tokens.py``: ``tokens`` (learned persistent memory slots, not segmented).
- ``lmstore.py``: ``knn_lm`` and ``spalm``, output-side retrieval of next tokens.
- ``view.py``: what the memory view draws (reach, merged per-segment records); no variant.

Per-layer info: ``memory_len`` (slots prepended / stored for that layer in the segment),
``memory`` (breakdown), ``reach`` ``(B, L)``: how many positions back each query can see.
"""

from __future__ import annotations

from ..variant import gather
from . import base, knn, lmstore, segments, tokens
from .base import Memory, MemoryState
from .knn import KNNMemory
from .segments import CompressiveMemory, XLMemory
from .tokens import TokenMemory

MEMORY = gather(base.VARIANTS, segments.VARIANTS, knn.VARIANTS, tokens.VARIANTS, lmstore.VARIANTS)

__all__ = ["MEMORY", "Memory", "MemoryState", "XLMemory", "CompressiveMemory", "TokenMemory", "KNNMemory"]
