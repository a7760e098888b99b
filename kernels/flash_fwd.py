"""FlashAttention-2 forward kernel with block sparsity and fused score modifiers.

Algorithm: see kernels/flash_common.py (online softmax over the visited key blocks; saves the
row log-sum-exp for the backward). Grid: ``(cdiv(Lq, BLOCK_M), B * h)``.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .flash_common import (FWD_DENSE_CONFIGS, LOG2E, PRUNE_FWD, SPARSE_CONFIGS, _allowed, _dot,
                           _score_mod)


@triton.jit
def _fwd_tile(acc, m_i, l_i, q, K, V, skn, svn, start_n, offs_m, offs_d, head, off, Lk, causal,
              scale, softcap, has_relb, SLOPES, RELB, tile, TILES, q_start,
              MASKED: tl.constexpr, SPARSE: tl.constexpr, has_mod,
              IEEE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One key block of the online softmax; ``MASKED`` tiles evaluate the element mask."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    kt_ptrs = K + offs_n[None, :] * skn + offs_d[:, None]  # (D, N): k^T
    v_ptrs = V + offs_n[:, None] * svn + offs_d[None, :]  # (N, D)
    if MASKED:
        kt = tl.load(kt_ptrs, mask=offs_n[None, :] < Lk, other=0.0)
        v = tl.load(v_ptrs, mask=offs_n[:, None] < Lk, other=0.0)
    else:
        kt = tl.load(kt_ptrs)
        v = tl.load(v_ptrs)
    qk = _dot(q, kt, IEEE)
    s, _t = _score_mod(qk, offs_m[:, None], offs_n[None, :], head, off, Lk, scale, softcap,
                       has_relb, SLOPES, RELB, has_mod)
    if MASKED:
        ok = _allowed(offs_m[:, None], offs_n[None, :], off, Lk, causal, tile, TILES, q_start,
                      start_n, SPARSE, BLOCK_M, BLOCK_N)
        s = tl.where(ok, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    # A row that has seen no allowed key keeps m = -inf; subtract 0 instead so exp gives 0, not NaN.
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2((m_i - m_use) * LOG2E)
    p = tl.exp2((s - m_use[:, None]) * LOG2E)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, IEEE)
    return acc, m_new, l_i


@triton.jit
def _attn_fwd(Q, K, V, O, LSE, SLOPES, RELB, KV_CNT, KV_IDX, KV_TILE, TILES,
              sqb, sqh, sqm, skb, skh, skn, svb, svh, svn, sob, soh, som,
              H, GROUP, Lq, Lk, max_kb, causal, scale, softcap, has_relb,
              HEAD_DIM: tl.constexpr, SPARSE: tl.constexpr, has_mod,
              IEEE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    qb = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    head = bh % H
    kvh = head // GROUP  # GQA / MQA: index the shared K/V head, no copies
    off = Lk - Lq  # queries are the last Lq key positions
    Q += b.to(tl.int64) * sqb + head.to(tl.int64) * sqh
    K += b.to(tl.int64) * skb + kvh.to(tl.int64) * skh
    V += b.to(tl.int64) * svb + kvh.to(tl.int64) * svh
    O += b.to(tl.int64) * sob + head.to(tl.int64) * soh
    q_start = qb * BLOCK_M
    offs_m = q_start + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + offs_m[:, None] * sqm + offs_d[None, :], mask=offs_m[:, None] < Lq, other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if SPARSE:
        cnt = tl.load(KV_CNT + qb)
        for slot in range(0, cnt):
            kb = tl.load(KV_IDX + qb * max_kb + slot)
            tile = tl.load(KV_TILE + qb * max_kb + slot)
            start_n = kb * BLOCK_N
            need_mask = (tile >= 0) | (start_n + BLOCK_N > Lk)
            need_mask = need_mask | ((causal != 0) & (start_n + BLOCK_N - 1 > q_start + off))
            if need_mask:
                acc, m_i, l_i = _fwd_tile(acc, m_i, l_i, q, K, V, skn, svn, start_n, offs_m, offs_d,
                                          head, off, Lk, causal, scale, softcap, has_relb, SLOPES, RELB,
                                          tile, TILES, q_start, True, SPARSE, has_mod, IEEE, BLOCK_M, BLOCK_N)
            else:
                acc, m_i, l_i = _fwd_tile(acc, m_i, l_i, q, K, V, skn, svn, start_n, offs_m, offs_d,
                                          head, off, Lk, causal, scale, softcap, has_relb, SLOPES, RELB,
                                          tile, TILES, q_start, False, SPARSE, has_mod, IEEE, BLOCK_M, BLOCK_N)
    else:
        # Dense: key blocks [0, n_full) need no element mask; [n_full, hi) straddle the causal
        # diagonal or the key tail. Causal skips everything right of the last row's diagonal.
        hi = Lk
        n_full = Lk // BLOCK_N
        if causal != 0:
            hi = tl.minimum(Lk, tl.maximum(q_start + BLOCK_M + off, 0))
            n_full = tl.minimum(n_full, tl.maximum(q_start + off + 1, 0) // BLOCK_N)
        for start_n in range(0, n_full * BLOCK_N, BLOCK_N):
            acc, m_i, l_i = _fwd_tile(acc, m_i, l_i, q, K, V, skn, svn, start_n, offs_m, offs_d,
                                      head, off, Lk, causal, scale, softcap, has_relb, SLOPES, RELB,
                                      0, TILES, q_start, False, SPARSE, has_mod, IEEE, BLOCK_M, BLOCK_N)
        for start_n in range(n_full * BLOCK_N, hi, BLOCK_N):
            acc, m_i, l_i = _fwd_tile(acc, m_i, l_i, q, K, V, skn, svn, start_n, offs_m, offs_d,
                                      head, off, Lk, causal, scale, softcap, has_relb, SLOPES, RELB,
                                      0, TILES, q_start, True, SPARSE, has_mod, IEEE, BLOCK_M, BLOCK_N)
    empty = l_i == 0.0  # no allowed key: output 0, lse +inf so the backward's p is 0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("inf"), m_i + tl.log(tl.where(empty, 1.0, l_i)))
    tl.store(O + offs_m[:, None] * som + offs_d[None, :], out.to(O.dtype.element_ty),
             mask=offs_m[:, None] < Lq)
    tl.store(LSE + bh.to(tl.int64) * Lq + offs_m, lse, mask=offs_m < Lq)


_KEY = ["Lq", "Lk", "HEAD_DIM", "causal", "has_mod"]
attn_fwd_dense = triton.autotune(FWD_DENSE_CONFIGS, key=_KEY, prune_configs_by=PRUNE_FWD)(_attn_fwd)
attn_fwd_sparse = triton.autotune(SPARSE_CONFIGS, key=_KEY, prune_configs_by=PRUNE_FWD)(_attn_fwd)
