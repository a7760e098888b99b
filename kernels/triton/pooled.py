"""Pooled attention maps in Triton: the forward's log-sum-exp, then one pass over the visited tiles.

Algorithm (formulas: kernels/pooled_dense.py; tiles and scores: kernels/triton/flash/common.py):
1. The FlashAttention-2 forward kernel (``flash.fwd._attn_fwd``, launched exactly as
   ``flash_attention`` launches it) gives every row's base-2 log-sum-exp ``lse`` (``+inf`` for a row
   with no allowed key). Its output is a scratch buffer (values = keys): only ``lse`` is kept.
2. ``_pooled_fwd``, one program per (query tile of ``BLOCK_M`` rows, batch * head), walks the same
   key tiles in the same order as the forward (dense: the unmasked bulk then the causal / tail band;
   block-sparse: the plan's full blocks then its partial ones) and recomputes ``p = 2^(s - lse)``
   with the same ``_score`` / ``_allowed`` helpers, so it sees exactly the forward's scores. Per
   tile it adds ``sum p`` into a register row of ``NCOL`` cell columns (column ``key // col_k``),
   and per query row ``sum p s``, ``sum p |j - i|``, the sink and window masses. It writes the
   cell row once, ``PART [B h, n_tiles_q, NCOL]``: partial sums per (query tile, cell column), no
   atomics, deterministic. The launcher adds the query tiles of each cell row and divides by its
   rows. Entropy: ``H = ln 2 (lse - sum p s)`` (base-2 scores).

Memory: ``lse`` and four statistics ``O(B h L)``, the partial grid ``O(B h (L / BLOCK_M) NCOL)``;
no ``L x L``. Tiles: the forward's lookup (``flash.common.dense_meta`` / ``sparse_meta``), the query
tile capped at 64 rows so a tile never straddles two cells (cells are multiples of 64 positions).
Specialisations: the forward's (dtype, head dim, dense / sparse, ``HAS_MOD``); everything else is
a run-time scalar. ``aot_specs`` lists them for ``kernels.tools.aot_check``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..pooled_dense import MAX_CELLS, PooledAttention, rows_per_block
from .flash.common import (
    DENSE_LAYOUT,
    NO_SPECIALIZE,
    _dense_bounds,
    _masked_score,
    _partial_block,
    _query_tile,
    dense_meta,
    sparse_meta,
)
from .flash.fwd import _attn_fwd
from .flash.launcher import GPU_LAYOUTS, _kernel_layout, check_modifiers
from .flash.launcher import unsupported_reason as _flash_reason
from .flash.plan import triton_plan
from .grid_limits import batch_slices

NCOL = MAX_CELLS  # cell columns held in registers by a program (a compile-time size)


@triton.jit
def _pool_tile(
    cols,
    ent,
    dist,
    sink,
    local,
    q,
    lse,
    K,
    skn,
    start_n,
    offs_m,
    offs_d,
    head,
    off,
    Lk,
    causal,
    scale,
    softcap,
    has_relb,
    SLOPES,
    RELB,
    tile,
    TILES,
    tq,
    tk,
    sink_k,
    window,
    col_k,
    MASKED: tl.constexpr,
    SPARSE: tl.constexpr,
    HAS_MOD: tl.constexpr,
    IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BQ: tl.constexpr,
    BK: tl.constexpr,
    NCOL: tl.constexpr,
):
    """One key tile: its probabilities, added into the cell row and the per-row statistics."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    kt_ptrs = K + offs_n[None, :] * skn + offs_d[:, None]  # (D, N): k^T
    if MASKED:
        kt = tl.load(kt_ptrs, mask=offs_n[None, :] < Lk, other=0.0)
    else:
        kt = tl.load(kt_ptrs)
    s = _masked_score(
        q,
        kt,
        offs_m,
        offs_n,
        head,
        off,
        Lk,
        causal,
        scale,
        softcap,
        has_relb,
        SLOPES,
        RELB,
        tile,
        TILES,
        tq,
        tk,
        MASKED,
        SPARSE,
        HAS_MOD,
        IEEE,
        BQ,
        BK,
    )
    p = tl.exp2(s - lse[:, None])  # 0 where s = -inf or the row is empty (lse = +inf)
    live = p > 0.0
    rel = offs_n[None, :] - (offs_m[:, None] + off)  # j - i_abs
    ent += tl.sum(p * tl.where(live, s, 0.0), 1)
    dist += tl.sum(p * tl.abs(rel).to(tl.float32), 1)
    sink += tl.sum(tl.where(offs_n[None, :] < sink_k, p, 0.0), 1)
    local += tl.sum(tl.where(tl.abs(rel) < window, p, 0.0), 1)
    total = tl.sum(tl.sum(p, 1), 0)
    cols += tl.where(tl.arange(0, NCOL) == start_n // col_k, total, 0.0)
    return cols, ent, dist, sink, local


@triton.jit(do_not_specialize=NO_SPECIALIZE + ["sink_k", "window", "col_k"])
def _pooled_fwd(
    Q,
    K,
    LSE,
    SLOPES,
    RELB,
    LAY,
    TILES,
    PART,
    ENT,
    DIST,
    SINK,
    LOCAL,
    sqb,
    sqh,
    sqm,
    skb,
    skh,
    skn,
    H,
    GROUP,
    Lq,
    Lk,
    lay_w,
    mf,
    mp,
    causal,
    scale,
    softcap,
    has_relb,
    sink_k,
    window,
    col_k,
    HEAD_DIM: tl.constexpr,
    SPARSE: tl.constexpr,
    HAS_MOD: tl.constexpr,
    IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BQ: tl.constexpr,
    BK: tl.constexpr,
    NCOL: tl.constexpr,
):
    bh, b, head, kvh, off, K, q_start, offs_m, offs_d, q = _query_tile(  # the forward's prologue
        Q, K, sqb, sqh, sqm, skb, skh, H, GROUP, Lq, Lk, HEAD_DIM, BLOCK_M
    )
    lse = tl.load(LSE + bh.to(tl.int64) * Lq + offs_m, mask=offs_m < Lq, other=float("inf"))
    cols = tl.zeros([NCOL], tl.float32)
    ent = tl.zeros([BLOCK_M], tl.float32)
    dist = tl.zeros([BLOCK_M], tl.float32)
    sink = tl.zeros([BLOCK_M], tl.float32)
    local = tl.zeros([BLOCK_M], tl.float32)
    if SPARSE:
        # The forward's walk (flash.fwd._attn_fwd): full blocks unmasked, then partial ones.
        NSUB: tl.constexpr = BK // BLOCK_N
        lrow = LAY + (q_start // BQ) * lay_w
        n_f = tl.load(lrow)
        n_p = tl.load(lrow + 1)
        for it in range(0, n_f * NSUB):
            tk = tl.load(lrow + 2 + it // NSUB) * BK
            cols, ent, dist, sink, local = _pool_tile(
                cols,
                ent,
                dist,
                sink,
                local,
                q,
                lse,
                K,
                skn,
                tk + (it % NSUB) * BLOCK_N,
                offs_m,
                offs_d,
                head,
                off,
                Lk,
                causal,
                scale,
                softcap,
                has_relb,
                SLOPES,
                RELB,
                0,
                TILES,
                0,
                tk,
                sink_k,
                window,
                col_k,
                False,
                SPARSE,
                HAS_MOD,
                IEEE,
                BLOCK_M,
                BLOCK_N,
                BQ,
                BK,
                NCOL,
            )
        for it in range(0, n_p * NSUB):
            tk, tile = _partial_block(lrow, it // NSUB, mf, mp, BK)
            cols, ent, dist, sink, local = _pool_tile(
                cols,
                ent,
                dist,
                sink,
                local,
                q,
                lse,
                K,
                skn,
                tk + (it % NSUB) * BLOCK_N,
                offs_m,
                offs_d,
                head,
                off,
                Lk,
                causal,
                scale,
                softcap,
                has_relb,
                SLOPES,
                RELB,
                tile,
                TILES,
                (q_start // BQ) * BQ,
                tk,
                sink_k,
                window,
                col_k,
                True,
                SPARSE,
                HAS_MOD,
                IEEE,
                BLOCK_M,
                BLOCK_N,
                BQ,
                BK,
                NCOL,
            )
    else:
        n_full, hi = _dense_bounds(q_start, off, Lk, causal, BLOCK_M, BLOCK_N)
        for start_n in range(0, n_full * BLOCK_N, BLOCK_N):
            cols, ent, dist, sink, local = _pool_tile(
                cols,
                ent,
                dist,
                sink,
                local,
                q,
                lse,
                K,
                skn,
                start_n,
                offs_m,
                offs_d,
                head,
                off,
                Lk,
                causal,
                scale,
                softcap,
                has_relb,
                SLOPES,
                RELB,
                0,
                TILES,
                q_start,
                start_n,
                sink_k,
                window,
                col_k,
                False,
                SPARSE,
                HAS_MOD,
                IEEE,
                BLOCK_M,
                BLOCK_N,
                BQ,
                BK,
                NCOL,
            )
        for start_n in range(n_full * BLOCK_N, hi, BLOCK_N):
            cols, ent, dist, sink, local = _pool_tile(
                cols,
                ent,
                dist,
                sink,
                local,
                q,
                lse,
                K,
                skn,
                start_n,
                offs_m,
                offs_d,
                head,
                off,
                Lk,
                causal,
                scale,
                softcap,
                has_relb,
                SLOPES,
                RELB,
                0,
                TILES,
                q_start,
                start_n,
                sink_k,
                window,
                col_k,
                True,
                SPARSE,
                HAS_MOD,
                IEEE,
                BLOCK_M,
                BLOCK_N,
                BQ,
                BK,
                NCOL,
            )
    empty = lse == float("inf")
    entropy = tl.where(empty, 0.0, (lse - ent) * 0.6931471805599453)  # ln 2 (lse - sum p s), base-2 s
    tl.store(PART + (bh.to(tl.int64) * tl.num_programs(0) + tl.program_id(0)) * NCOL + tl.arange(0, NCOL), cols)
    row = bh.to(tl.int64) * Lq + offs_m
    tl.store(ENT + row, entropy, mask=offs_m < Lq)
    tl.store(DIST + row, dist, mask=offs_m < Lq)
    tl.store(SINK + row, sink, mask=offs_m < Lq)
    tl.store(LOCAL + row, local, mask=offs_m < Lq)


# (element bytes, head dim, sparse, has_mod) -> changes to the forward's tile for the pooled pass,
# whose statistics and cell row hold more registers than the forward's output accumulator frees
# (measured with kernels.tools.aot_check on sm_80 / sm_90): fp32 d 128 (tf32x3 splits every operand)
# spilled 176-360 B on the forward's 32 x 32 tile, none on 32 x 16 with 8 warps; fp16 / bf16 d 32
# dense with modifiers spilled 432-488 B on 64 x 64.
_FP32_D128 = {"BLOCK_N": 16, "num_warps": 8}
_POOLED_TILE = {
    **{(4, 128, sp, mod): _FP32_D128 for sp in (False, True) for mod in (False, True)},
    (2, 32, False, True): {"BLOCK_N": 32},
}


def pooled_meta(head_dim: int, elem_bytes: int, has_mod: bool, layout=None) -> dict:
    """Launch meta of the forward (lse) and of ``_pooled_fwd`` for a dense launch (``layout`` None) or a
    block-sparse one on a ``(block_q, block_k)`` layout: the forward's tile, query tile capped at 64,
    with the changes of ``_POOLED_TILE``."""
    if layout is None:
        fwd = {**dense_meta(head_dim, elem_bytes, False, has_mod), **DENSE_LAYOUT}
    else:
        fwd = sparse_meta(head_dim, elem_bytes, layout[0], layout[1], "fwd", has_mod)
    key = (min(elem_bytes, 4), head_dim, layout is not None, has_mod)
    return fwd, {**fwd, "BLOCK_M": min(64, fwd["BLOCK_M"]), **_POOLED_TILE.get(key, {})}


def unsupported_reason(q, k, *, block_mask=None, rel_k=None, max_cols: int = NCOL, **_) -> str | None:
    """Why the Triton pooled kernels cannot run these arguments (None if they can)."""
    if rel_k is not None:
        return "rel_k is not fused in the Triton kernels"
    reason = _flash_reason(q, k, k, block_mask=block_mask)
    if reason is not None:
        return reason
    if max_cols > NCOL:
        return f"more than {NCOL} cell columns"
    return None


def _lse(q, k, bm, causal, slopes, relb, has_relb, softcap, scale, has_mod, meta):
    """Base-2 row log-sum-exp ``(B, h, Lq)`` from the forward kernel (its output is scratch)."""
    B, h, lq, d = q.shape
    o = torch.empty_like(q)
    lse = torch.empty(B, h, lq, dtype=torch.float32, device=q.device)
    layout = _layout_args(bm, causal, q.device)
    _attn_fwd[(triton.cdiv(lq, meta["BLOCK_M"]), B * h)](
        q,
        k,
        k,
        o,
        lse,
        slopes,
        relb,
        slopes,  # SINKS: unread (has_sink 0); the pooled maps of a sink model are its dense map (models.long_context)
        *layout[:2],
        q.stride(0),
        q.stride(1),
        q.stride(2),
        k.stride(0),
        k.stride(1),
        k.stride(2),
        k.stride(0),
        k.stride(1),
        k.stride(2),
        o.stride(0),
        o.stride(1),
        o.stride(2),
        h,
        h // k.shape[1],
        lq,
        k.shape[2],
        *layout[2:],
        int(causal),
        scale,
        0.0 if softcap is None else softcap,
        int(has_relb),
        0,  # has_sink
        HEAD_DIM=d,
        SPARSE=bm is not None,
        HAS_MOD=has_mod,
        IEEE=q.dtype == torch.float32,
        **meta,
    )
    return lse


def _layout_args(bm, causal, device):
    if bm is None:
        i32 = torch.zeros(1, dtype=torch.int32, device=device)
        return (i32, i32.to(torch.int8), 0, 0, 0)
    plan = triton_plan(bm, causal, device)  # memoised on the BlockMask
    return (plan.q_major, plan.tiles, plan.q_major.shape[1], plan.q_mf, plan.q_mp)


def _pooled_one(q, k, bm, causal, alibi_slopes, rel_bias, softcap, scale, block_q, block_k, sink_k, window):
    B, h, lq, d = q.shape
    lk = k.shape[2]
    q, k = _kernel_layout(q), _kernel_layout(k)
    has_mod = alibi_slopes is not None or rel_bias is not None or softcap is not None
    slopes = (
        torch.zeros(h, dtype=torch.float32, device=q.device)
        if alibi_slopes is None
        else alibi_slopes.detach().float().contiguous()
    )
    relb = (
        torch.zeros(1, dtype=torch.float32, device=q.device)
        if rel_bias is None
        else rel_bias.detach().float().contiguous()
    )
    fwd_meta, meta = pooled_meta(d, q.element_size(), has_mod, None if bm is None else (bm.block_q, bm.block_k))
    lse = _lse(q, k, bm, causal, slopes, relb, rel_bias is not None, softcap, scale, has_mod, fwd_meta)
    if block_q % meta["BLOCK_M"] or block_k % meta["BLOCK_N"]:
        raise ValueError(f"cells {block_q}x{block_k} are not multiples of the tile {meta['BLOCK_M']}x{meta['BLOCK_N']}")
    n_t = triton.cdiv(lq, meta["BLOCK_M"])
    part = torch.empty(B * h, n_t, NCOL, dtype=torch.float32, device=q.device)
    stats = torch.empty(4, B, h, lq, dtype=torch.float32, device=q.device)
    layout = _layout_args(bm, causal, q.device)
    _pooled_fwd[(n_t, B * h)](
        q,
        k,
        lse,
        slopes,
        relb,
        *layout[:2],
        part,
        stats[0],
        stats[1],
        stats[2],
        stats[3],
        q.stride(0),
        q.stride(1),
        q.stride(2),
        k.stride(0),
        k.stride(1),
        k.stride(2),
        h,
        h // k.shape[1],
        lq,
        lk,
        *layout[2:],
        int(causal),
        scale,
        0.0 if softcap is None else softcap,
        int(rel_bias is not None),
        int(sink_k),
        int(window),
        block_k,
        HEAD_DIM=d,
        SPARSE=bm is not None,
        HAS_MOD=has_mod,
        IEEE=q.dtype == torch.float32,
        NCOL=NCOL,
        **meta,
    )
    per = block_q // meta["BLOCK_M"]
    nqp, nkp = -(-lq // block_q), -(-lk // block_k)
    part = torch.nn.functional.pad(part, (0, 0, 0, nqp * per - n_t))  # (B h, n_qp * per, NCOL)
    mass = part.view(B, h, nqp, per, NCOL).sum(3)[..., :nkp] / rows_per_block(lq, block_q, q.device)[:, None]
    return mass, stats


def pooled_triton(
    q,
    k,
    *,
    causal=False,
    block_mask=None,
    alibi_slopes=None,
    rel_bias=None,
    softcap=None,
    scale,
    block_q: int,
    block_k: int,
    sink_k: int = 4,
    window: int = 64,
) -> PooledAttention:
    """:func:`kernels.pooled.pooled_attention` in the Triton kernels (CUDA, or CPU tensors under
    ``TRITON_INTERPRET=1``). ``block_q`` / ``block_k``: cell sizes, multiples of 64 (and of the tile)."""
    nkp = -(-k.shape[2] // block_k)
    reason = unsupported_reason(q, k, block_mask=block_mask, max_cols=nkp)
    if reason is not None:
        raise ValueError(f"pooled_triton: {reason}")
    if (
        q.device.type == "cuda"
        and block_mask is not None
        and (block_mask.block_q, block_mask.block_k) not in GPU_LAYOUTS
    ):
        raise ValueError(f"pooled_triton: layout tile not compiled ({GPU_LAYOUTS})")
    check_modifiers(q, k, alibi_slopes, rel_bias)
    bm = None if block_mask is None else block_mask.to(q.device)
    parts = [
        _pooled_one(
            q[s],
            k[s],
            bm,
            bool(causal),
            alibi_slopes,
            rel_bias,
            softcap,
            float(scale),
            block_q,
            block_k,
            sink_k,
            window,
        )
        for s in batch_slices(q.shape[0], q.shape[1], "query heads")
    ]
    mass = torch.cat([m for m, _ in parts], 0)
    stats = torch.cat([st for _, st in parts], 1)
    from ..backend import triton_backend_name

    name = triton_backend_name(q.device) if q.device.type == "cuda" else "triton (interpreter)"
    return PooledAttention(
        mass=mass,
        entropy=stats[0],
        distance=stats[1],
        sink=stats[2],
        local=stats[3],
        block_q=block_q,
        block_k=block_k,
        q_len=q.shape[2],
        k_len=k.shape[2],
        sink_k=int(sink_k),
        window=int(window),
        backend=name + " pooled",
    )


def aot_specs(quick: bool):
    """Every ``_pooled_fwd`` specialisation the launcher can pick (its lse pass is the forward kernel,
    whose specialisations ``kernels.tools.aot_check`` already lists): per dtype, head dim, dense / sparse on
    every GPU layout tile, with and without modifiers."""
    from .flash.launcher import DTYPES, HEAD_DIMS

    ttype = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
    specs = []
    for dtype in (torch.float16,) if quick else DTYPES:
        for d in (64,) if quick else HEAD_DIMS:
            probe = torch.empty(1, 1, 1, d, dtype=dtype, device="meta")
            if _flash_reason(probe, probe, probe) is not None:
                continue
            tt = ttype[dtype]
            ptrs = {
                "Q": "*" + tt,
                "K": "*" + tt,
                "LSE": "*fp32",
                "SLOPES": "*fp32",
                "RELB": "*fp32",
                "LAY": "*i32",
                "TILES": "*i8",
                "PART": "*fp32",
                "ENT": "*fp32",
                "DIST": "*fp32",
                "SINK": "*fp32",
                "LOCAL": "*fp32",
                **{"s" + t + a: "i32" for t in ("q", "k") for a in ("b", "h", "m", "n")},
            }
            for layout in (None, *GPU_LAYOUTS):
                for has_mod in (False, True):
                    _, meta = pooled_meta(d, dtype.itemsize, has_mod, layout)
                    consts = {
                        "HEAD_DIM": d,
                        "SPARSE": layout is not None,
                        "HAS_MOD": has_mod,
                        "IEEE": dtype == torch.float32,
                        "NCOL": NCOL,
                        **{n: meta[n] for n in ("BLOCK_M", "BLOCK_N", "BQ", "BK")},
                    }
                    blocks = "/{:d}x{:d}".format(*layout) if layout else ""
                    name = (
                        f"_pooled_fwd {tt} d{d} {'sparse' if layout else 'dense'}{' mod' if has_mod else ''}"
                        f" {meta['BLOCK_M']}x{meta['BLOCK_N']}"
                        f"{blocks} w{meta['num_warps']} s{meta['num_stages']}"
                    )
                    specs.append((name, _pooled_fwd, ptrs, consts, meta["num_warps"], meta["num_stages"]))
    return specs
