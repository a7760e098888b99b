"""``kernels.pooled_attention``: pooled attention maps at any length, from the attention kernels themselves.

What it returns (per head: the mass each query block puts on each key block, and per query the
entropy, mean attention distance, sink mass and local-window mass) and the formulas:
``kernels/pooled_dense.py``. How: the attention's own tiled structure, in two steps per query block:
the row log-sum-exp of the forward, then one pass over exactly the tiles the layout computes, adding
each tile's probabilities into its cell of a grid of at most ``max_cells x max_cells`` per head.
Memory is ``O(B h n_cells^2 + B h L)`` plus one tile (Triton) or one cache-sized chunk (CPU) of
scores; no ``L x L`` tensor exists at any point.

Dispatch, as ``kernels.attention``:
- CUDA tensors the Triton kernel supports -> ``kernels/triton/pooled.py`` (the forward kernel's base-2
  log-sum-exp, then a second kernel that writes per-(query tile, cell column) partial sums);
- everything else (CPU, ``rel_k``) -> ``kernels/cpu/pooled.py`` (block-sparse strips).

The scores are those of ``kernels/reference.py`` for the same arguments (``causal``, ``block_mask``,
``alibi_slopes``, ``rel_bias``, ``softcap``, ``scale``, ``rel_k``; ``rel_v`` does not change the
probabilities). Without a ``block_mask`` the dense pattern is walked tile by tile (causal: never
above the diagonal) without a stored layout.
"""

from __future__ import annotations

import math

from .backend import triton_backend_name, triton_reason
from .block_mask import BlockMask
from .cpu.pooled import pooled_block_sparse
from .pooled_dense import (
    MAX_CELLS,
    TILE,
    PooledAttention,
    check_stats_args,
    pooled_block,
)

__all__ = ["pooled_attention", "pooled_backend"]


def _triton_reason(q, k, bm, rel_k, n_cols: int = MAX_CELLS) -> str | None:
    """None when the Triton pooled kernel runs these arguments, else why the torch path is used."""
    return triton_reason(q.device, "pooled", q, k, block_mask=bm, rel_k=rel_k, max_cols=n_cols)


def pooled_backend(q, k, *, block_mask=None, rel_k=None) -> str:
    """Name of the backend :func:`pooled_attention` runs for these arguments."""
    if _triton_reason(q, k, block_mask, rel_k) is None:
        return triton_backend_name(q.device) + " pooled"
    return f"torch-{q.device.type} block-sparse"


def _check(q, k, block_mask):
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(f"pooled_attention expects 4-D q, k [B, h, L, d]; got {tuple(q.shape)}, {tuple(k.shape)}")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3] or q.shape[1] % k.shape[1]:
        raise ValueError(
            f"q {tuple(q.shape)} and k {tuple(k.shape)} do not match (batch, head dim, "
            "query heads a multiple of K/V heads)"
        )
    if q.shape[2] > k.shape[2]:
        raise ValueError(f"Lq={q.shape[2]} > Lk={k.shape[2]}: queries are the last Lq key positions")
    if block_mask is not None and (block_mask.q_len, block_mask.k_len) != (q.shape[2], k.shape[2]):
        raise ValueError(
            f"block mask is for {(block_mask.q_len, block_mask.k_len)}, inputs are {(q.shape[2], k.shape[2])}"
        )


def pooled_attention(
    q,
    k,
    *,
    causal=False,
    block_mask: BlockMask | None = None,
    alibi_slopes=None,
    rel_bias=None,
    softcap=None,
    scale=None,
    rel_k=None,
    max_cells: int = MAX_CELLS,
    block: int | None = None,
    sink_k: int = 4,
    window: int = 64,
) -> PooledAttention:
    """Pooled attention of ``q [B, h, Lq, d]`` over ``k [B, h_kv, Lk, d]`` (see the module docstring).

    ``block``: the cell size in positions (a multiple of the layout tile); by default the smallest
    one giving at most ``max_cells`` cells per side (:func:`kernels.pooled_dense.pooled_block`).
    ``sink_k``: how many first keys count as sinks; ``window``: the local window (``|j - i| < window``).
    """
    _check(q, k, block_mask)
    check_stats_args(sink_k, window)
    lq, lk = q.shape[2], k.shape[2]
    bm = block_mask.to(q.device) if block_mask is not None else None
    tile_q, tile_k = (TILE, TILE) if bm is None else (bm.block_q, bm.block_k)
    if block is None:
        block_q, block_k = pooled_block(lq, max_cells, tile_q), pooled_block(lk, max_cells, tile_k)
    else:
        if block < 1 or block % tile_q or block % tile_k:
            raise ValueError(f"block {block} must be a positive multiple of the layout tile {tile_q}x{tile_k}")
        block_q = block_k = int(block)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    softcap = None if softcap is None else float(softcap)
    if _triton_reason(q, k, bm, rel_k, -(-lk // block_k)) is None:
        from .triton.pooled import pooled_triton

        return pooled_triton(
            q,
            k,
            causal=causal,
            block_mask=bm,
            alibi_slopes=alibi_slopes,
            rel_bias=rel_bias,
            softcap=softcap,
            scale=scale,
            block_q=block_q,
            block_k=block_k,
            sink_k=sink_k,
            window=window,
        )
    return pooled_block_sparse(
        q,
        k,
        bm,
        block_q=block_q,
        block_k=block_k,
        causal=causal,
        scale=scale,
        alibi_slopes=alibi_slopes,
        rel_bias=rel_bias,
        softcap=softcap,
        rel_k=rel_k,
        sink_k=sink_k,
        window=window,
    )
