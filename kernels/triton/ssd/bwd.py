"""Backward kernels of Mamba-2's chunked SSD (the layout: ``fwd.py``; the algorithm: ``__init__.py``).

``_ssd_chunk_dstate``: per chunk ``G_c = sum_t exp(A_t) dy_t c_t^T``, what chunk c's outputs ask of the state
entering it; ``_ssd_state_pass_bwd``: the reverse pass ``dh_c = exp(A_last,c) dh_{c+1} + G_c`` (stores
``dh_{c+1}``, the gradient of the state chunk c leaves, ``= dS_c``; ``dh_0`` is the initial state's gradient);
then per chunk and head, with that chunk's ``h_c`` and ``dS_c`` (called ``D``) at hand, and
``M[t, s] = (c_t . b_s) exp(A_t - A_s)``, ``K[t, s] = exp(A_t - A_s) dt_s (dy_t . x_s)`` (both for s <= t, else 0),
``e_s = exp(A_last - A_s)``:
- ``_ssd_chunk_bwd_dx``: ``dx_s = dt_s u_s`` with ``u = M^T dy + e (b D^T)``; the gradient of the cumsum ``A_t``,
  ``exp(A_t) dy_t . (h c_t) + rowsum_t(K * cb) - colsum_t(K * cb) - e_t dt_t x_t . (D b_t)``, and of ``A_last``,
  ``sum_s e_s dt_s x_s . (D b_s) + exp(A_last) <D, h>``, both given to ``dt_r a`` as in-chunk suffix sums:
  ``d dt = x . u + a suffix`` and this chunk's part of ``da = sum dt suffix``;
- ``_ssd_chunk_bwd_dbdc``: this head's ``dc = exp(A) (dy h) + K b`` and ``db = K^T c + e dt (x D)``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .fwd import NO_SPEC, TF, _block, _causal_decay, _chunk_decay, _gram, _heads, _rows


@triton.jit(do_not_specialize=NO_SPEC)
def _ssd_chunk_dstate(DY, DT, A, Cm, GS, H, G, L, P, N, PR, NR, C: tl.constexpr, BP: tl.constexpr, BN: tl.constexpr):
    """``G_c = sum_t exp(A_t) dy_t c_t^T`` (``[PR, NR]``: [p, n])."""
    c = tl.program_id(0)
    bh = tl.program_id(1)
    head, bg = _heads(bh, H, G)
    r = c * C + tl.arange(0, C)
    dt, cum, last = _chunk_decay(DT, A, bh, head, r, L)
    row = bh.to(tl.int64) * tl.num_programs(0) + c
    for p0 in range(0, PR, BP):
        fp = p0 + tl.arange(0, BP)
        dye = tl.trans(_rows(DY + bh.to(tl.int64) * L * P, r, fp, L, P) * tl.exp(cum)[:, None])  # (BP, C)
        for n0 in range(0, NR, BN):
            fn = n0 + tl.arange(0, BN)
            cc = _rows(Cm + bg.to(tl.int64) * L * N, r, fn, L, N)  # (C, BN)
            tl.store(GS + row * PR * NR + fp[:, None] * NR + fn[None, :], tl.dot(dye, cc, input_precision=TF))


@triton.jit(do_not_specialize=NO_SPEC)
def _ssd_state_pass_bwd(GS, ACH, DHF, DS, DH0, n_c, DD, HAS_DHF: tl.constexpr, BLOCK: tl.constexpr):
    """Reverse over chunks from ``dh_{n_c}`` (``DHF`` or zeros): ``DS_c = dh_{c+1}``,
    ``dh_c = exp(A_last,c) dh_{c+1} + G_c``; ``dh_0`` to ``DH0``."""
    blk = tl.program_id(0)
    bh = tl.program_id(1)
    e = blk * BLOCK + tl.arange(0, BLOCK)
    if HAS_DHF:
        d = tl.load(DHF + bh.to(tl.int64) * DD + e)
    else:
        d = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(0, n_c):
        row = bh.to(tl.int64) * n_c + (n_c - 1 - i)
        tl.store(DS + row * DD + e, d)
        d = tl.exp(tl.load(ACH + row)) * d + tl.load(GS + row * DD + e)
    tl.store(DH0 + bh.to(tl.int64) * DD + e, d)


@triton.jit(do_not_specialize=NO_SPEC)
def _ssd_chunk_bwd_dx(
    X,
    DT,
    A,
    Bm,
    Cm,
    HS,
    DS,
    DY,
    DX,
    DDT,
    DA,
    H,
    G,
    L,
    P,
    N,
    PR,
    NR,
    C: tl.constexpr,
    BP: tl.constexpr,
    BN: tl.constexpr,
):
    """dx, d dt and this chunk's part of da, of one chunk and head (formulas: the module docstring)."""
    c = tl.program_id(0)
    bh = tl.program_id(1)
    head, bg = _heads(bh, H, G)
    rows = tl.arange(0, C)
    r = c * C + rows
    dt, cum, last = _chunk_decay(DT, A, bh, head, r, L)
    xp, dyp = X + bh.to(tl.int64) * L * P, DY + bh.to(tl.int64) * L * P
    bp, cp = Bm + bg.to(tl.int64) * L * N, Cm + bg.to(tl.int64) * L * N
    row = bh.to(tl.int64) * tl.num_programs(0) + c
    hs, ds = HS + row * PR * NR, DS + row * PR * NR
    seg = _causal_decay(cum, rows)
    cb = _gram(cp, bp, r, L, N, BN, C)  # c_t . b_s
    v = seg * dt[None, :] * _gram(dyp, xp, r, L, P, BP, C) * cb  # (C, C): the intra-chunk terms, each
    d_cum = tl.sum(v, 1) - tl.sum(v, 0)
    mt = tl.trans(cb * seg)
    e = tl.exp(last - cum)
    x_u = tl.zeros([C], dtype=tl.float32)  # x_s . u_s
    x_bd = tl.zeros([C], dtype=tl.float32)  # e_s x_s . (D b_s)
    dyhc = tl.zeros([C], dtype=tl.float32)  # dy_t . (h c_t)
    dh = tl.zeros([BP], dtype=tl.float32)  # rows of <D, h>
    for p0 in range(0, PR, BP):
        fp = p0 + tl.arange(0, BP)
        x = _rows(xp, r, fp, L, P)  # (C, BP)
        dy = _rows(dyp, r, fp, L, P)
        u = tl.dot(mt, dy, input_precision=TF)  # (C, BP): M^T dy
        bd = tl.zeros([C, BP], dtype=tl.float32)  # e_s D b_s
        for n0 in range(0, NR, BN):
            fn = n0 + tl.arange(0, BN)
            hsb = _block(hs, p0, n0, NR, BP, BN)  # (BP, BN)
            dsb = _block(ds, p0, n0, NR, BP, BN)
            bd += tl.dot(_rows(bp, r, fn, L, N) * e[:, None], tl.trans(dsb), input_precision=TF)
            dyhc += tl.sum(_rows(cp, r, fn, L, N) * tl.dot(dy, hsb, input_precision=TF), 1)
            dh += tl.sum(dsb * hsb, 1)
        u += bd
        tl.store(
            DX + bh.to(tl.int64) * L * P + r[:, None] * P + fp[None, :],
            dt[:, None] * u,
            mask=(r[:, None] < L) & (fp[None, :] < P),
        )
        x_u += tl.sum(x * u, 1)
        x_bd += tl.sum(x * bd, 1)
    xbd = dt * x_bd  # (C,): e_t dt_t x_t . (D b_t), the chunk-state path
    d_cum += tl.exp(cum) * dyhc - xbd
    d_last = tl.sum(xbd, 0) + tl.exp(last) * tl.sum(dh, 0)
    # A_t = sum_{r <= t} dt_r a and A_last = sum_r dt_r a: d(dt_r a) = sum_{t >= r} d_cum_t + d_last
    suffix = tl.sum(d_cum, 0) - tl.cumsum(d_cum, 0) + d_cum + d_last
    tl.store(DDT + bh.to(tl.int64) * L + r, x_u + tl.load(A + head) * suffix, mask=r < L)
    tl.store(DA + row, tl.sum(dt * suffix, 0))


@triton.jit(do_not_specialize=NO_SPEC)
def _ssd_chunk_bwd_dbdc(
    X,
    DT,
    A,
    Bm,
    Cm,
    HS,
    DS,
    DY,
    DB,
    DC,
    H,
    G,
    L,
    P,
    N,
    PR,
    NR,
    C: tl.constexpr,
    BP: tl.constexpr,
    BN: tl.constexpr,
):
    """This head's db and dc (``[L, N]`` each; the heads of a group are summed by the launcher), per block of N."""
    c = tl.program_id(0)
    bh = tl.program_id(1)
    head, bg = _heads(bh, H, G)
    rows = tl.arange(0, C)
    r = c * C + rows
    dt, cum, last = _chunk_decay(DT, A, bh, head, r, L)
    xp, dyp = X + bh.to(tl.int64) * L * P, DY + bh.to(tl.int64) * L * P
    bp, cp = Bm + bg.to(tl.int64) * L * N, Cm + bg.to(tl.int64) * L * N
    row = bh.to(tl.int64) * tl.num_programs(0) + c
    hs, ds = HS + row * PR * NR, DS + row * PR * NR
    k = _causal_decay(cum, rows) * dt[None, :] * _gram(dyp, xp, r, L, P, BP, C)  # (C, C) [t, s]
    # dc, then db: one pass over N each, so that only one of K, K^T is live (registers).
    ea = tl.exp(cum)
    for n0 in range(0, NR, BN):
        fn = n0 + tl.arange(0, BN)
        dc = tl.dot(k, _rows(bp, r, fn, L, N), input_precision=TF)  # (C, BN)
        for p0 in range(0, PR, BP):
            dye = _rows(dyp, r, p0 + tl.arange(0, BP), L, P) * ea[:, None]
            dc += tl.dot(dye, _block(hs, p0, n0, NR, BP, BN), input_precision=TF)
        tl.store(
            DC + bh.to(tl.int64) * L * N + r[:, None] * N + fn[None, :], dc, mask=(r[:, None] < L) & (fn[None, :] < N)
        )
    kt = tl.trans(k)
    xe = tl.exp(last - cum) * dt
    for n0 in range(0, NR, BN):
        fn = n0 + tl.arange(0, BN)
        db = tl.dot(kt, _rows(cp, r, fn, L, N), input_precision=TF)
        for p0 in range(0, PR, BP):
            xeb = _rows(xp, r, p0 + tl.arange(0, BP), L, P) * xe[:, None]
            db += tl.dot(xeb, _block(ds, p0, n0, NR, BP, BN), input_precision=TF)
        tl.store(
            DB + bh.to(tl.int64) * L * N + r[:, None] * N + fn[None, :], db, mask=(r[:, None] < L) & (fn[None, :] < N)
        )
