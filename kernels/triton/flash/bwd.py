"""FlashAttention-2 backward (Dao 2023, Algorithm 2) with block sparsity and fused score modifiers.

Algorithm, per (batch, head), scores in log2 units (kernels/triton/flash/common.py), ``lse`` the
forward's base-2 log-sum-exp per query row:
- ``_attn_bwd_preprocess``: ``delta_i = sum_d o_id do_id`` (one program per query block).
- ``_attn_bwd_dkdv``: one program per key block, ``K_j``, ``V_j`` and the fp32 accumulators
  ``dK_j``, ``dV_j`` resident; for every query tile ``i`` that visits the block, P is recomputed
  once::

      s^T  = K_j Q_i^T                  (1)   p^T = 2^(s^T - lse_i)
      dV_j += p^T dO_i                  (2)
      dp^T = V_j dO_i^T                 (3)   ds^T = p^T (dp^T - delta_i)
      dK_j += ds^T Q_i                  (4)   (dK_j scaled once at the end)

- ``_attn_bwd_dq``: one program per query block, ``Q_i``, ``dO_i`` resident; for every key tile:
  ``s = Q_i K_j^T`` (5), ``dp = dO_i V_j^T`` (6), ``ds``, ``dQ_i += ds K_j`` (7).

Seven matrix products per (query tile, key tile) where FlashAttention-2 has five: FA2 adds
``ds K_j`` into dQ inside the dK/dV pass with fp32 atomic adds, whose order changes from run to
run (dQ is then not bitwise reproducible; flash-attn's deterministic mode serialises them). Here
the dQ kernel recomputes s and dp (two more products: the backward does 3.5x the forward's
products instead of 2.5x), and every gradient is a fixed-order sum: no atomics, no O(L^2)
scratch, bitwise reproducible. The soft cap multiplies ``ds`` by ``1 - tanh^2`` before it reaches
q and k (d(rel_bias) takes ``ds`` before that factor).

Walks and grids (grid y is at most 65535: the launcher runs larger batches as slices,
kernels/triton/grid_limits.py):
- dK/dV: grid ``(cdiv(Lk, BLOCK_N), B * h_kv, n_split)``; loops over ``gps`` of the query heads
  sharing the K/V head (GQA / MQA: no K/V copies, no atomics) and over the query tiles that visit
  the key block: dense, from the causal diagonal to Lq; block-sparse, the key-major plan (full
  blocks unmasked, then partial ones with their int8 tiles). With GQA / MQA at batch 1
  ``B * h_kv * cdiv(Lk, BLOCK_N)`` programs may be fewer than the SMs: the launcher then splits
  the group over ``n_split`` programs, each writing its partial dK / dV to its own slice, summed
  afterwards in a fixed order.
- The dense dK/dV walk is ONE loop: the query tiles that straddle the causal diagonal
  (``start_m < m_full``) apply the element mask under a uniform branch. The FA2 / Triton-tutorial
  shape (a masked loop over the band, then an unmasked loop, both software-pipelined inside the
  GQA loop) spilled: 255 registers and 384 B of stack at bf16 d128 64 x 64 on sm_90
  (one loop: none with Triton 3.9.0, 8 B with 3.7.1, the release torch 2.13.0 pins), 344 B at d64
  on sm_80 (one loop: 72 B; none on sm_90); measured with ``python -m kernels.tools.aot_check``. The branch costs the
  tiles below the band one scalar compare.
- dQ: grid ``(cdiv(Lq, BLOCK_M), B * h)``; the same key walk as the forward. For d(rel_bias) each
  tile reduces ``ds`` along its ``BLOCK_M + BLOCK_N - 1`` diagonals in registers and stores the
  sums to its own scratch row (``[B h, n_qb, n_kb, DW]``, O(L^2 / BLOCK) floats);
  :func:`kernels.triton.flash.launcher.rel_bias_grad` overlap-adds the rows (``F.fold``, a gather per
  output, no atomics).
Both follow the FA2 order inside a tile (scores, p, the first product, then dp and ds) so at most
two [M, N] fp32 tiles are live. Tiles per dtype / head dim: the lookup in common.py.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .common import (
    NO_SPECIALIZE,
    _allowed,
    _dense_bounds,
    _dot,
    _partial_block,
    _query_tile,
    _score,
)


@triton.jit
def _attn_bwd_preprocess(
    O, DO, DELTA, sob, soh, som, sdob, sdoh, sdom, H, Lq, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr
):
    bh = tl.program_id(1)
    b = bh // H
    head = bh % H
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row = offs_m[:, None] < Lq
    o = tl.load(
        O + b.to(tl.int64) * sob + head.to(tl.int64) * soh + offs_m[:, None] * som + offs_d[None, :],
        mask=row,
        other=0.0,
    ).to(tl.float32)
    do = tl.load(
        DO + b.to(tl.int64) * sdob + head.to(tl.int64) * sdoh + offs_m[:, None] * sdom + offs_d[None, :],
        mask=row,
        other=0.0,
    ).to(tl.float32)
    tl.store(DELTA + bh.to(tl.int64) * Lq + offs_m, tl.sum(o * do, 1), mask=offs_m < Lq)


@triton.jit
def _dkdv_tile(
    dk,
    dv,
    k,
    v,
    Q,
    DO,
    LSE,
    DELTA,
    sqm,
    sdom,
    start_m,
    start_n,
    offs_n,
    offs_d,
    head,
    off,
    Lq,
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
    m_mask,
    MASKED: tl.constexpr,
    SPARSE: tl.constexpr,
    HAS_MOD: tl.constexpr,
    IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BQ: tl.constexpr,
    BK: tl.constexpr,
):
    offs_m = start_m + tl.arange(0, BLOCK_M)
    row = offs_m < Lq
    # Rows past Lq load lse = +inf so their p is exactly 0.
    qt = tl.load(Q + offs_m[None, :] * sqm + offs_d[:, None], mask=row[None, :], other=0.0)  # (D, M)
    lse = tl.load(LSE + offs_m, mask=row, other=float("inf"))
    st, tt = _score(
        _dot(k, qt, IEEE),
        offs_m[None, :],
        offs_n[:, None],
        head,
        off,
        Lk,
        scale,
        softcap,
        has_relb,
        SLOPES,
        RELB,
        HAS_MOD,
    )  # (N, M)
    pt = tl.exp2(st - lse[None, :])
    if MASKED:
        if SPARSE:  # a partial block of the block mask
            ok = _allowed(offs_m[None, :], offs_n[:, None], off, Lk, causal, tile, TILES, tq, tk, SPARSE, BQ, BK)
            pt = tl.where(ok, pt, 0.0)
        else:
            # Dense: only the query tiles starting before m_mask (the band [lo, m_full)) straddle
            # the causal diagonal. A uniform branch in the one loop: a masked loop followed by an
            # unmasked one spilled (module docstring).
            if start_m < m_mask:
                ok = _allowed(offs_m[None, :], offs_n[:, None], off, Lk, causal, tile, TILES, tq, tk, SPARSE, BQ, BK)
                pt = tl.where(ok, pt, 0.0)
    do = tl.load(DO + offs_m[:, None] * sdom + offs_d[None, :], mask=row[:, None], other=0.0)  # (M, D)
    dv += _dot(pt.to(do.dtype), do, IEEE)
    delta = tl.load(DELTA + offs_m, mask=row, other=0.0)
    dst = pt * (_dot(v, tl.trans(do), IEEE) - delta[None, :])  # (N, M)
    if HAS_MOD:
        dst = dst * (1.0 - tt * tt)  # soft cap chain rule (t = 0 without a cap)
    dk += _dot(dst.to(qt.dtype), tl.trans(qt), IEEE)
    return dk, dv


@triton.jit(do_not_specialize=NO_SPECIALIZE)
def _attn_bwd_dkdv(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    SLOPES,
    RELB,
    DK,
    DV,
    LAY,
    TILES,
    sqb,
    sqh,
    sqm,
    skb,
    skh,
    skn,
    svb,
    svh,
    svn,
    sdob,
    sdoh,
    sdom,
    sdks,
    sdkb,
    sdkh,
    sdkn,
    H,
    GROUP,
    gps,
    Lq,
    Lk,
    lay_w,
    mf,
    mp,
    causal,
    scale,
    softcap,
    has_relb,
    HEAD_DIM: tl.constexpr,
    SPARSE: tl.constexpr,
    HAS_MOD: tl.constexpr,
    IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BQ: tl.constexpr,
    BK: tl.constexpr,
):
    kb = tl.program_id(0)
    bkv = tl.program_id(1)
    sp = tl.program_id(2)  # which gps query heads of the GQA group this program sums
    h_kv = H // GROUP
    b = bkv // h_kv
    kvh = bkv % h_kv
    off = Lk - Lq
    start_n = kb * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    col = offs_n[:, None] < Lk
    k = tl.load(
        K + b.to(tl.int64) * skb + kvh.to(tl.int64) * skh + offs_n[:, None] * skn + offs_d[None, :], mask=col, other=0.0
    )
    v = tl.load(
        V + b.to(tl.int64) * svb + kvh.to(tl.int64) * svh + offs_n[:, None] * svn + offs_d[None, :], mask=col, other=0.0
    )
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    # Dense causal: query tiles [lo, m_full) straddle the diagonal (element mask), [m_full, Lq)
    # are below it. Padded keys (past Lk) only pollute rows of dk/dv that are never stored, and
    # rows past Lq have p = 0: no tail mask needed.
    lo = 0
    m_full = 0
    if causal != 0:
        lo = (tl.maximum(start_n - off, 0) // BLOCK_M) * BLOCK_M
        m_full = tl.minimum(
            tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - off, 0), BLOCK_M) * BLOCK_M, tl.cdiv(Lq, BLOCK_M) * BLOCK_M
        )  # >= lo since start_n < Lk
    NSUB: tl.constexpr = BQ // BLOCK_M
    kbl = start_n // BK
    lrow = LAY + kbl * lay_w
    n_f = 0
    n_p = 0
    if SPARSE:
        n_f = tl.load(lrow)
        n_p = tl.load(lrow + 1)
    for gi in range(0, gps):  # query heads reading this K/V head (GQA / MQA), gps per split
        head = kvh * GROUP + sp * gps + gi
        Qh = Q + b.to(tl.int64) * sqb + head.to(tl.int64) * sqh
        DOh = DO + b.to(tl.int64) * sdob + head.to(tl.int64) * sdoh
        LSEh = LSE + (b * H + head).to(tl.int64) * Lq
        DELTAh = DELTA + (b * H + head).to(tl.int64) * Lq
        if SPARSE:
            # This program's BLOCK_N keys lie in layout key block kbl (BK keys); its row of the
            # key-major plan lists the query blocks (BQ rows) reading it, full ones first. Flat
            # loops over (block, sub-tile), as in the forward.
            tq_next = tl.load(lrow + 2) * BQ  # read one ahead, as in the forward
            for it in range(0, n_f * NSUB):
                start_m = tq_next + (it % NSUB) * BLOCK_M
                tq_next = tl.load(lrow + 2 + tl.minimum((it + 1) // NSUB, mf - 1)) * BQ
                dk, dv = _dkdv_tile(
                    dk,
                    dv,
                    k,
                    v,
                    Qh,
                    DOh,
                    LSEh,
                    DELTAh,
                    sqm,
                    sdom,
                    start_m,
                    start_n,
                    offs_n,
                    offs_d,
                    head,
                    off,
                    Lq,
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
                    kbl * BK,
                    0,
                    False,
                    SPARSE,
                    HAS_MOD,
                    IEEE,
                    BLOCK_M,
                    BLOCK_N,
                    BQ,
                    BK,
                )
            tq_next, tile_next = _partial_block(lrow, 0, mf, mp, BQ)
            for it in range(0, n_p * NSUB):
                tq = tq_next
                tile = tile_next
                tq_next, tile_next = _partial_block(lrow, tl.minimum((it + 1) // NSUB, mp - 1), mf, mp, BQ)
                dk, dv = _dkdv_tile(
                    dk,
                    dv,
                    k,
                    v,
                    Qh,
                    DOh,
                    LSEh,
                    DELTAh,
                    sqm,
                    sdom,
                    tq + (it % NSUB) * BLOCK_M,
                    start_n,
                    offs_n,
                    offs_d,
                    head,
                    off,
                    Lq,
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
                    kbl * BK,
                    0,
                    True,
                    SPARSE,
                    HAS_MOD,
                    IEEE,
                    BLOCK_M,
                    BLOCK_N,
                    BQ,
                    BK,
                )
        else:
            for start_m in range(lo, Lq, BLOCK_M):
                dk, dv = _dkdv_tile(
                    dk,
                    dv,
                    k,
                    v,
                    Qh,
                    DOh,
                    LSEh,
                    DELTAh,
                    sqm,
                    sdom,
                    start_m,
                    start_n,
                    offs_n,
                    offs_d,
                    head,
                    off,
                    Lq,
                    Lk,
                    causal,
                    scale,
                    softcap,
                    has_relb,
                    SLOPES,
                    RELB,
                    0,
                    TILES,
                    start_m,
                    start_n,
                    m_full,
                    True,
                    SPARSE,
                    HAS_MOD,
                    IEEE,
                    BLOCK_M,
                    BLOCK_N,
                    BQ,
                    BK,
                )
    # With the group split over programs, split sp writes its partial sums to slice sp of DK / DV.
    out = (
        sp.to(tl.int64) * sdks
        + b.to(tl.int64) * sdkb
        + kvh.to(tl.int64) * sdkh
        + offs_n[:, None] * sdkn
        + offs_d[None, :]
    )
    tl.store(DK + out, (dk * scale).to(DK.dtype.element_ty), mask=col)
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=col)


@triton.jit
def _dq_tile(
    dq,
    q,
    do,
    lse,
    delta,
    K,
    V,
    DRB,
    skn,
    svn,
    start_m,
    start_n,
    offs_m,
    offs_d,
    head,
    off,
    Lq,
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
    MASKED: tl.constexpr,
    SPARSE: tl.constexpr,
    HAS_MOD: tl.constexpr,
    IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BQ: tl.constexpr,
    BK: tl.constexpr,
    NEED_DRB: tl.constexpr,
):
    offs_n = start_n + tl.arange(0, BLOCK_N)
    kt_ptrs = K + offs_n[None, :] * skn + offs_d[:, None]  # (D, N)
    vt_ptrs = V + offs_n[None, :] * svn + offs_d[:, None]  # (D, N)
    if MASKED:
        kt = tl.load(kt_ptrs, mask=offs_n[None, :] < Lk, other=0.0)
        vt = tl.load(vt_ptrs, mask=offs_n[None, :] < Lk, other=0.0)
    else:
        kt = tl.load(kt_ptrs)
        vt = tl.load(vt_ptrs)
    s, t = _score(
        _dot(q, kt, IEEE),
        offs_m[:, None],
        offs_n[None, :],
        head,
        off,
        Lk,
        scale,
        softcap,
        has_relb,
        SLOPES,
        RELB,
        HAS_MOD,
    )  # (M, N)
    p = tl.exp2(s - lse[:, None])
    if MASKED:
        ok = _allowed(offs_m[:, None], offs_n[None, :], off, Lk, causal, tile, TILES, tq, tk, SPARSE, BQ, BK)
        p = tl.where(ok, p, 0.0)
    ds = p * (_dot(do, vt, IEEE) - delta[:, None])
    if HAS_MOD:
        if NEED_DRB:
            # d rel_bias[head, j - i_abs + Lk - 1] = sum of ds on that diagonal. The tile's
            # diagonals are summed here (row a of the tile holds diagonal t at column
            # a + t - (BLOCK_M - 1)) and the DW sums stored to this tile's own row of DRB: no
            # atomics; the launcher overlap-adds the rows in a fixed order (deterministic).
            DW: tl.constexpr = 2 * BLOCK_M if BLOCK_M >= BLOCK_N else 2 * BLOCK_N
            inb = (offs_m[:, None] < Lq) & (offs_n[None, :] < Lk)
            dsm = tl.where(inb, ds, 0.0)
            diag = tl.arange(0, DW)
            col = tl.arange(0, BLOCK_M)[:, None] + diag[None, :] - (BLOCK_M - 1)  # (M, DW)
            on = (col >= 0) & (col < BLOCK_N)
            g = tl.gather(dsm, tl.minimum(tl.maximum(col, 0), BLOCK_N - 1), 1)  # (M, DW)
            # (A sub-tile past the key tail of a layout block has no row: it sums to 0 anyway.)
            tl.store(
                DRB + (start_n // BLOCK_N) * DW + diag, tl.sum(tl.where(on, g, 0.0), 0), mask=(diag * 0 + start_n) < Lk
            )
        ds = ds * (1.0 - t * t)  # soft cap chain rule (t = 0 without a cap)
    dq += _dot(ds.to(q.dtype), tl.trans(kt), IEEE)
    return dq


@triton.jit(do_not_specialize=NO_SPECIALIZE)
def _attn_bwd_dq(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    SLOPES,
    RELB,
    DQ,
    DRB,
    LAY,
    TILES,
    sqb,
    sqh,
    sqm,
    skb,
    skh,
    skn,
    svb,
    svh,
    svn,
    sdob,
    sdoh,
    sdom,
    sdqb,
    sdqh,
    sdqm,
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
    HEAD_DIM: tl.constexpr,
    SPARSE: tl.constexpr,
    HAS_MOD: tl.constexpr,
    IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BQ: tl.constexpr,
    BK: tl.constexpr,
    NEED_DRB: tl.constexpr,
):
    bh, b, head, kvh, off, K, start_m, offs_m, offs_d, q = _query_tile(
        Q, K, sqb, sqh, sqm, skb, skh, H, GROUP, Lq, Lk, HEAD_DIM, BLOCK_M
    )
    # This program's rows of the d(rel_bias) scratch: [B * h, n_qb, n_kb, DW], one per key tile.
    DW: tl.constexpr = 2 * BLOCK_M if BLOCK_M >= BLOCK_N else 2 * BLOCK_N
    DRB += (bh.to(tl.int64) * tl.cdiv(Lq, BLOCK_M) + tl.program_id(0)) * tl.cdiv(Lk, BLOCK_N) * DW
    V += b.to(tl.int64) * svb + kvh.to(tl.int64) * svh
    row = offs_m < Lq
    do = tl.load(
        DO + b.to(tl.int64) * sdob + head.to(tl.int64) * sdoh + offs_m[:, None] * sdom + offs_d[None, :],
        mask=row[:, None],
        other=0.0,
    )
    lse = tl.load(LSE + bh.to(tl.int64) * Lq + offs_m, mask=row, other=float("inf"))
    delta = tl.load(DELTA + bh.to(tl.int64) * Lq + offs_m, mask=row, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if SPARSE:  # full then partial key blocks, flat loops over (block, sub-tile) as in the forward
        NSUB: tl.constexpr = BK // BLOCK_N
        lrow = LAY + (start_m // BQ) * lay_w
        n_f = tl.load(lrow)
        n_p = tl.load(lrow + 1)
        tk_next = tl.load(lrow + 2) * BK  # read one ahead, as in the forward
        for it in range(0, n_f * NSUB):
            tk = tk_next
            tk_next = tl.load(lrow + 2 + tl.minimum((it + 1) // NSUB, mf - 1)) * BK
            dq = _dq_tile(
                dq,
                q,
                do,
                lse,
                delta,
                K,
                V,
                DRB,
                skn,
                svn,
                start_m,
                tk + (it % NSUB) * BLOCK_N,
                offs_m,
                offs_d,
                head,
                off,
                Lq,
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
                False,
                SPARSE,
                HAS_MOD,
                IEEE,
                BLOCK_M,
                BLOCK_N,
                BQ,
                BK,
                NEED_DRB,
            )
        tk_next, tile_next = _partial_block(lrow, 0, mf, mp, BK)
        for it in range(0, n_p * NSUB):
            tk = tk_next
            tile = tile_next
            tk_next, tile_next = _partial_block(lrow, tl.minimum((it + 1) // NSUB, mp - 1), mf, mp, BK)
            dq = _dq_tile(
                dq,
                q,
                do,
                lse,
                delta,
                K,
                V,
                DRB,
                skn,
                svn,
                start_m,
                tk + (it % NSUB) * BLOCK_N,
                offs_m,
                offs_d,
                head,
                off,
                Lq,
                Lk,
                causal,
                scale,
                softcap,
                has_relb,
                SLOPES,
                RELB,
                tile,
                TILES,
                (start_m // BQ) * BQ,
                tk,
                True,
                SPARSE,
                HAS_MOD,
                IEEE,
                BLOCK_M,
                BLOCK_N,
                BQ,
                BK,
                NEED_DRB,
            )
    else:
        n_full, hi = _dense_bounds(start_m, off, Lk, causal, BLOCK_M, BLOCK_N)
        for start_n in range(0, n_full * BLOCK_N, BLOCK_N):
            dq = _dq_tile(
                dq,
                q,
                do,
                lse,
                delta,
                K,
                V,
                DRB,
                skn,
                svn,
                start_m,
                start_n,
                offs_m,
                offs_d,
                head,
                off,
                Lq,
                Lk,
                causal,
                scale,
                softcap,
                has_relb,
                SLOPES,
                RELB,
                0,
                TILES,
                start_m,
                start_n,
                False,
                SPARSE,
                HAS_MOD,
                IEEE,
                BLOCK_M,
                BLOCK_N,
                BQ,
                BK,
                NEED_DRB,
            )
        for start_n in range(n_full * BLOCK_N, hi, BLOCK_N):
            dq = _dq_tile(
                dq,
                q,
                do,
                lse,
                delta,
                K,
                V,
                DRB,
                skn,
                svn,
                start_m,
                start_n,
                offs_m,
                offs_d,
                head,
                off,
                Lq,
                Lk,
                causal,
                scale,
                softcap,
                has_relb,
                SLOPES,
                RELB,
                0,
                TILES,
                start_m,
                start_n,
                True,
                SPARSE,
                HAS_MOD,
                IEEE,
                BLOCK_M,
                BLOCK_N,
                BQ,
                BK,
                NEED_DRB,
            )
    tl.store(
        DQ + b.to(tl.int64) * sdqb + head.to(tl.int64) * sdqh + offs_m[:, None] * sdqm + offs_d[None, :],
        (dq * scale).to(DQ.dtype.element_ty),
        mask=row[:, None],
    )
