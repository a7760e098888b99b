"""Forward kernels of Mamba-2's chunked SSD (algorithm and shapes: ``kernels/triton/ssd/__init__.py``).

One program per (chunk, batch x head) for the chunk kernels, one per (block of the state, batch x head) for the
sequential pass over the chunks. Tiles are ``[C, DP]`` (positions x padded head / state width) and ``[DP, DP]``
(a head's state ``h[p, n]``, stored padded in fp32 so the chunk kernels load it unmasked).
"""

from __future__ import annotations

import triton
import triton.language as tl

TF = tl.constexpr("tf32x3")  # ~fp32 accuracy on tensor cores (as kernels/triton/linear_attention.py)
# Integer sizes: no value specialisation, so a launch compiles what kernels.tools.aot_check does.
NO_SPEC = ["H", "G", "L", "P", "N", "n_c", "DD"]


@triton.jit
def _rows(X, r, f, L, W, WP: tl.constexpr):
    """Rows ``r`` (``[C]``) of a row-major ``[L, W]`` fp32 tensor, padded to ``WP`` columns with zeros."""
    return tl.load(X + r[:, None] * W + f[None, :], mask=(r[:, None] < L) & (f[None, :] < W), other=0.0)


@triton.jit
def _chunk_decay(DT, A, bh, head, r, L):
    """``dt`` of rows ``r`` (0 past ``L``: a masked tail neither decays nor adds), the in-chunk inclusive cumsum
    ``A_t = sum_{r <= t} dt_r a`` and the chunk's total ``A_last`` (the decay across the whole chunk)."""
    dt = tl.load(DT + bh.to(tl.int64) * L + r, mask=r < L, other=0.0)
    da = dt * tl.load(A + head)
    return dt, tl.cumsum(da, 0), tl.sum(da, 0)


@triton.jit
def _heads(bh, H, G):
    """(head, row of ``[B g]`` of its B / C group) of row ``bh`` of ``[B h]``: head i reads group i // (h / g)."""
    head = bh % H
    return head, (bh // H) * G + head // (H // G)


@triton.jit
def _causal_decay(A, rows):
    """``[C, C]``: ``exp(A_t - A_s)`` for ``s <= t``, else 0 (the exponent masked first: it is > 0 above)."""
    tri = rows[None, :] <= rows[:, None]
    return tl.where(tri, tl.exp(tl.where(tri, A[:, None] - A[None, :], 0.0)), 0.0)


@triton.jit(do_not_specialize=NO_SPEC)
def _ssd_chunk_state(X, DT, A, Bm, S, ACH, H, G, L, P, N, C: tl.constexpr, DP: tl.constexpr):
    """Chunk c's own state ``S_c = sum_s exp(A_last - A_s) dt_s x_s b_s^T`` ([DP, DP]) and ``A_last``."""
    c = tl.program_id(0)
    bh = tl.program_id(1)
    n_c = tl.num_programs(0)
    head, bg = _heads(bh, H, G)
    r = c * C + tl.arange(0, C)
    f = tl.arange(0, DP)
    dt, cum, last = _chunk_decay(DT, A, bh, head, r, L)
    x = _rows(X + bh.to(tl.int64) * L * P, r, f, L, P, DP)  # (C, DP)
    b = _rows(Bm + bg.to(tl.int64) * L * N, r, f, L, N, DP)  # (C, DP)
    w = tl.exp(last - cum) * dt  # decay to the chunk's end, times the step
    row = bh.to(tl.int64) * n_c + c
    s = tl.dot(tl.trans(x * w[:, None]), b, input_precision=TF)  # (DP, DP): [p, n]
    tl.store(S + row * DP * DP + f[:, None] * DP + f[None, :], s)
    tl.store(ACH + row, last)


@triton.jit(do_not_specialize=NO_SPEC)
def _ssd_state_pass(S, ACH, H0, HS, HF, n_c, DD, HAS_H0: tl.constexpr, BLOCK: tl.constexpr):
    """Sequential over chunks: ``HS_c`` (the state entering chunk c) ``= h_{c}``, ``h_{c+1} = exp(A_last,c) h_c +
    S_c``, from ``h_0`` (``H0`` or zeros); the final state to ``HF``. A block of ``BLOCK`` state entries each."""
    blk = tl.program_id(0)
    bh = tl.program_id(1)
    e = blk * BLOCK + tl.arange(0, BLOCK)
    if HAS_H0:
        h = tl.load(H0 + bh.to(tl.int64) * DD + e)
    else:
        h = tl.zeros([BLOCK], dtype=tl.float32)
    for c in range(0, n_c):
        row = bh.to(tl.int64) * n_c + c
        tl.store(HS + row * DD + e, h)
        h = tl.exp(tl.load(ACH + row)) * h + tl.load(S + row * DD + e)
    tl.store(HF + bh.to(tl.int64) * DD + e, h)


@triton.jit(do_not_specialize=NO_SPEC)
def _ssd_chunk_scan(X, DT, A, Bm, Cm, HS, Y, H, G, L, P, N, C: tl.constexpr, DP: tl.constexpr):
    """``y_t = exp(A_t) h_c c_t + sum_{s <= t in chunk} (c_t . b_s) exp(A_t - A_s) dt_s x_s``."""
    c = tl.program_id(0)
    bh = tl.program_id(1)
    head, bg = _heads(bh, H, G)
    rows = tl.arange(0, C)
    r = c * C + rows
    f = tl.arange(0, DP)
    dt, cum, last = _chunk_decay(DT, A, bh, head, r, L)
    x = _rows(X + bh.to(tl.int64) * L * P, r, f, L, P, DP)  # (C, DP)
    b = _rows(Bm + bg.to(tl.int64) * L * N, r, f, L, N, DP)
    cc = _rows(Cm + bg.to(tl.int64) * L * N, r, f, L, N, DP)
    hs = tl.load(HS + (bh.to(tl.int64) * tl.num_programs(0) + c) * DP * DP + f[:, None] * DP + f[None, :])
    y = tl.exp(cum)[:, None] * tl.dot(cc, tl.trans(hs), input_precision=TF)  # (C, DP): the carried state
    m = tl.dot(cc, tl.trans(b), input_precision=TF) * _causal_decay(cum, rows) * dt[None, :]  # (C, C) [t, s]
    y += tl.dot(m, x, input_precision=TF)
    tl.store(Y + bh.to(tl.int64) * L * P + r[:, None] * P + f[None, :], y, mask=(r[:, None] < L) & (f[None, :] < P))
