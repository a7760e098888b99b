"""CUDA launch-grid limits, and splitting a batch so every launch stays inside them.

A CUDA grid is at most ``2^31 - 1`` programs along x but only 65535 along y and z. The attention
kernels put ``B * h`` (batch times heads) on grid y, so ``B * h > 65535`` (for example batch 2048
with 32 heads) would fail to launch. Rather than refuse, the launchers run such a batch as several
launches over consecutive batch slices (:func:`batch_slices`), each within the limit; the kernels
and their results are unchanged (every batch element is independent). Only ``h`` itself above the
limit is an error. ``MAX_GRID_Y`` is read at call time, so a test can lower it to exercise the
split on small tensors in the interpreter.
"""

from __future__ import annotations

MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y and gridDim.z


def batch_slices(batch: int, per_item: int, what: str = "heads", limit: int | None = None) -> list[slice]:
    """Consecutive slices of ``range(batch)`` with ``len(slice) * per_item <= limit`` each.

    ``per_item`` is the grid-y extent one batch element needs (its number of heads); ``limit``
    defaults to :data:`MAX_GRID_Y`. One slice covering everything when it already fits. Raises
    ValueError naming ``what`` when a single batch element exceeds the limit.
    """
    limit = MAX_GRID_Y if limit is None else limit
    if per_item > limit:
        raise ValueError(
            f"{what} = {per_item} exceeds the CUDA grid limit of {limit} programs per grid "
            f"dimension; use at most {limit} {what}"
        )
    if batch * per_item <= limit:
        return [slice(0, batch)]
    step = max(1, limit // max(1, per_item))
    return [slice(start, min(batch, start + step)) for start in range(0, batch, step)]
