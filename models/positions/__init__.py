"""Position encodings (docs/catalogue.md section 4): one registry entry per way of telling token order.

Every build class is an ``nn.Module(cfg)`` (a ``base.NoPosition``) with two hooks the model calls:

- ``embed(x, pos) -> x``: absolute encodings add to the token embeddings here (``absolute.py``:
  ``sinusoidal``, ``learned``; ``floater.py``: a learned ODE trajectory).
- ``modify(q, k, layer, k_start=0, scale=None) -> (q, k, mods)``: relative encodings act inside
  attention. ``mods`` are keyword arguments of ``kernels.attention`` (see kernels/reference.py for
  the score convention): ``rope`` rotates q and k, ``alibi`` returns per-head slopes, ``t5`` a
  learned bucketed bias, ``shaw`` clipped relative key / value vectors, ``xl`` Transformer-XL's
  ``(q + u) . k + (q + v) . W_R r`` score, ``deberta`` / ``tupe`` (``untied.py``) a per-pair term.
  ``none`` (``base.py``) does nothing and relies on the causal mask.

Keys sit at absolute positions ``k_start .. k_start + Lk - 1``; queries are the last ``Lq`` of
them, so ``rel = j - i_abs`` and relative tables of ``2 Lk - 1`` rows are indexed by
``rel + Lk - 1``.

Each module ends with ``VARIANTS``; ``POSITION`` gathers them in dropdown order. No module imports
this package back.
"""

from __future__ import annotations

from ..variant import gather
from . import absolute, alibi, base, floater, rope, shaw, t5, untied, xl
from .absolute import sinusoid, sinusoidal_table, table_dtype
from .alibi import alibi_slopes
from .base import NoPosition
from .rope import apply_rope
from .t5 import t5_bucket_check, t5_exact_range, t5_relative_bucket

POSITION = gather(
    base.VARIANTS,
    absolute.VARIANTS,
    shaw.VARIANTS,
    t5.VARIANTS,
    xl.VARIANTS,
    rope.VARIANTS,
    alibi.VARIANTS,
    floater.VARIANTS,
    untied.VARIANTS,
)

__all__ = [
    "POSITION",
    "NoPosition",
    "sinusoid",
    "sinusoidal_table",
    "table_dtype",
    "apply_rope",
    "alibi_slopes",
    "t5_relative_bucket",
    "t5_exact_range",
    "t5_bucket_check",
]
