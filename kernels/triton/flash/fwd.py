"""FlashAttention-2 forward kernel with block sparsity and fused score modifiers.

Algorithm and specialisation trade-offs: see kernels/triton/flash/common.py (online softmax over the
visited key blocks in log2 units; saves the base-2 row log-sum-exp for the backward). A learned
sink (``has_sink``, logit ``SINKS[head]``) is the online softmax's first term: the row starts at
``m = s_sink``, ``l = 1``, ``acc = 0`` (it has no value) instead of ``-inf, 0, 0``, so the loop's rescaling
carries it into the denominator and the saved log-sum-exp, and the backward's recomputed ``p`` is the
sink-normalised one (a row with no allowed key: output 0, all its mass on the sink).
Grid: ``(cdiv(Lq, BLOCK_M), B * h)``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .common import (
    LOG2E,
    NO_SPECIALIZE,
    _dense_bounds,
    _dot,
    _masked_score,
    _partial_block,
    _query_tile,
)


@triton.jit
def _fwd_tile(
    acc,
    m_i,
    l_i,
    q,
    K,
    V,
    skn,
    svn,
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
    MASKED: tl.constexpr,
    SPARSE: tl.constexpr,
    HAS_MOD: tl.constexpr,
    IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BQ: tl.constexpr,
    BK: tl.constexpr,
):
    """One key block of the online softmax; ``MASKED`` tiles evaluate the element mask (the block
    mask's partial tile ``tile`` starts at ``(tq, tk)`` and is ``BQ x BK``)."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    kt_ptrs = K + offs_n[None, :] * skn + offs_d[:, None]  # (D, N): k^T
    v_ptrs = V + offs_n[:, None] * svn + offs_d[None, :]  # (N, D)
    if MASKED:
        kt = tl.load(kt_ptrs, mask=offs_n[None, :] < Lk, other=0.0)
        v = tl.load(v_ptrs, mask=offs_n[:, None] < Lk, other=0.0)
    else:
        kt = tl.load(kt_ptrs)
        v = tl.load(v_ptrs)
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
    m_new = tl.maximum(m_i, tl.max(s, 1))
    if MASKED:
        # A row that has seen no allowed key keeps m = -inf: subtract 0 so exp2 gives 0, not NaN.
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    alpha = tl.exp2(m_i - m_use)
    p = tl.exp2(s - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, IEEE)
    return acc, m_new, l_i


@triton.jit(do_not_specialize=NO_SPECIALIZE)
def _attn_fwd(
    Q,
    K,
    V,
    O,
    LSE,
    SLOPES,
    RELB,
    SINKS,
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
    sob,
    soh,
    som,
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
    has_sink,
    HEAD_DIM: tl.constexpr,
    SPARSE: tl.constexpr,
    HAS_MOD: tl.constexpr,
    IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BQ: tl.constexpr,
    BK: tl.constexpr,
):
    bh, b, head, kvh, off, K, q_start, offs_m, offs_d, q = _query_tile(
        Q, K, sqb, sqh, sqm, skb, skh, H, GROUP, Lq, Lk, HEAD_DIM, BLOCK_M
    )
    V += b.to(tl.int64) * svb + kvh.to(tl.int64) * svh
    O += b.to(tl.int64) * sob + head.to(tl.int64) * soh

    if has_sink:  # the head's sink logit (natural units -> log2) opens the online softmax as a term of l
        m_i = tl.zeros([BLOCK_M], tl.float32) + tl.load(SINKS + head).to(tl.float32) * LOG2E
        l_i = tl.full([BLOCK_M], 1.0, tl.float32)  # 2^(s_sink - m) with m = s_sink; the sink has no value
    else:
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if SPARSE:
        # The program's BLOCK_M rows lie in layout block qbl (BQ rows); its row of the query-major
        # plan lists the full key blocks, then the partial ones (kernels/triton/flash/plan.py). Each
        # BK-wide block runs as BK / BLOCK_N program tiles. One flat loop per kind over
        # (block, sub-tile) so the software pipeliner prefetches the next tiles' K / V. The block
        # index is read one iteration ahead and carried: K / V addresses then depend on no load
        # of the same iteration, and Triton pipelines them as deep as the dense loop
        # (python -m kernels.tools.pipeline_check; read in place, the index load cost one stage).
        NSUB: tl.constexpr = BK // BLOCK_N
        lrow = LAY + (q_start // BQ) * lay_w
        n_f = tl.load(lrow)
        n_p = tl.load(lrow + 1)
        tk_next = tl.load(lrow + 2) * BK
        for it in range(0, n_f * NSUB):
            tk = tk_next
            tk_next = tl.load(lrow + 2 + tl.minimum((it + 1) // NSUB, mf - 1)) * BK
            acc, m_i, l_i = _fwd_tile(
                acc,
                m_i,
                l_i,
                q,
                K,
                V,
                skn,
                svn,
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
                False,
                SPARSE,
                HAS_MOD,
                IEEE,
                BLOCK_M,
                BLOCK_N,
                BQ,
                BK,
            )
        tk_next, tile_next = _partial_block(lrow, 0, mf, mp, BK)
        for it in range(0, n_p * NSUB):
            tk = tk_next
            tile = tile_next
            tk_next, tile_next = _partial_block(lrow, tl.minimum((it + 1) // NSUB, mp - 1), mf, mp, BK)
            acc, m_i, l_i = _fwd_tile(
                acc,
                m_i,
                l_i,
                q,
                K,
                V,
                skn,
                svn,
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
        n_full, hi = _dense_bounds(q_start, off, Lk, causal, BLOCK_M, BLOCK_N)
        for start_n in range(0, n_full * BLOCK_N, BLOCK_N):
            acc, m_i, l_i = _fwd_tile(
                acc,
                m_i,
                l_i,
                q,
                K,
                V,
                skn,
                svn,
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
                False,
                SPARSE,
                HAS_MOD,
                IEEE,
                BLOCK_M,
                BLOCK_N,
                BQ,
                BK,
            )
        for start_n in range(n_full * BLOCK_N, hi, BLOCK_N):
            acc, m_i, l_i = _fwd_tile(
                acc,
                m_i,
                l_i,
                q,
                K,
                V,
                skn,
                svn,
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
                True,
                SPARSE,
                HAS_MOD,
                IEEE,
                BLOCK_M,
                BLOCK_N,
                BQ,
                BK,
            )
    empty = l_i == 0.0  # no allowed key (and no sink): output 0, lse +inf so the backward's p is 0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("inf"), m_i + tl.log2(tl.where(empty, 1.0, l_i)))
    tl.store(O + offs_m[:, None] * som + offs_d[None, :], out.to(O.dtype.element_ty), mask=offs_m[:, None] < Lq)
    tl.store(LSE + bh.to(tl.int64) * Lq + offs_m, lse, mask=offs_m < Lq)
