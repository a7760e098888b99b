"""Backward kernels of Mamba-2's chunked SSD (the derivation: ``kernels/triton/ssd/__init__.py``).

``_ssd_chunk_dstate``: per chunk ``G_c = sum_t exp(A_t) dy_t c_t^T``, what chunk c's outputs ask of the state
entering it; ``_ssd_state_pass_bwd``: the reverse pass ``dh_c = exp(A_last,c) dh_{c+1} + G_c`` (stores
``dh_{c+1}``, the gradient of the state chunk c leaves, ``= dS_c``; ``dh_0`` is the initial state's gradient);
``_ssd_chunk_bwd``: everything else of one chunk and head, with that chunk's ``h_c`` and ``dS_c`` at hand.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .fwd import NO_SPEC, TF, _causal_decay, _chunk_decay, _heads, _rows


@triton.jit(do_not_specialize=NO_SPEC)
def _ssd_chunk_dstate(DY, DT, A, Cm, GS, H, G, L, P, N, C: tl.constexpr, DP: tl.constexpr):
    """``G_c = sum_t exp(A_t) dy_t c_t^T`` ([DP, DP]: [p, n])."""
    c = tl.program_id(0)
    bh = tl.program_id(1)
    head, bg = _heads(bh, H, G)
    r = c * C + tl.arange(0, C)
    f = tl.arange(0, DP)
    dt, cum, last = _chunk_decay(DT, A, bh, head, r, L)
    dy = _rows(DY + bh.to(tl.int64) * L * P, r, f, L, P, DP)
    cc = _rows(Cm + bg.to(tl.int64) * L * N, r, f, L, N, DP)
    g = tl.dot(tl.trans(dy * tl.exp(cum)[:, None]), cc, input_precision=TF)
    row = bh.to(tl.int64) * tl.num_programs(0) + c
    tl.store(GS + row * DP * DP + f[:, None] * DP + f[None, :], g)


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
def _ssd_chunk_bwd(
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
    DB,
    DC,
    DA,
    H,
    G,
    L,
    P,
    N,
    C: tl.constexpr,
    DP: tl.constexpr,
):
    """dx, d dt, this head's db and dc, and this chunk's part of da, of one chunk and head.

    With ``M[t, s] = (c_t . b_s) exp(A_t - A_s)`` (s <= t), ``K[t, s] = exp(A_t - A_s) dt_s (dy_t . x_s)``
    (s <= t), ``e_s = exp(A_last - A_s)``, ``h`` the entering state and ``D = dS_c``:
    ``dx_s = dt_s u_s`` with ``u = M^T dy + e (b D^T)``; ``dc = exp(A) (dy h) + K b``;
    ``db = K^T c + e dt (x D)``; the gradient of the cumsum ``A_t``: ``exp(A_t) dy_t . (h c_t)
    + rowsum_t(K * cb) - colsum_t(K * cb) - e_t dt_t x_t . (D b_t)``, and of ``A_last``:
    ``sum_s e_s dt_s x_s . (D b_s) + exp(A_last) <D, h>``; both go to ``dt_r a`` as suffix sums.
    """
    c = tl.program_id(0)
    bh = tl.program_id(1)
    head, bg = _heads(bh, H, G)
    rows = tl.arange(0, C)
    r = c * C + rows
    f = tl.arange(0, DP)
    dt, cum, last = _chunk_decay(DT, A, bh, head, r, L)
    x = _rows(X + bh.to(tl.int64) * L * P, r, f, L, P, DP)  # (C, DP)
    dy = _rows(DY + bh.to(tl.int64) * L * P, r, f, L, P, DP)
    b = _rows(Bm + bg.to(tl.int64) * L * N, r, f, L, N, DP)
    cc = _rows(Cm + bg.to(tl.int64) * L * N, r, f, L, N, DP)
    row = bh.to(tl.int64) * tl.num_programs(0) + c
    hs = tl.load(HS + row * DP * DP + f[:, None] * DP + f[None, :])  # (DP, DP): [p, n]
    ds = tl.load(DS + row * DP * DP + f[:, None] * DP + f[None, :])
    seg = _causal_decay(cum, rows)  # (C, C) [t, s]
    cb = tl.dot(cc, tl.trans(b), input_precision=TF)
    k = seg * dt[None, :] * tl.dot(dy, tl.trans(x), input_precision=TF)
    e = tl.exp(last - cum)
    bd = tl.dot(b, tl.trans(ds), input_precision=TF)  # (C, DP): D b_s
    u = tl.dot(tl.trans(cb * seg), dy, input_precision=TF) + e[:, None] * bd
    tl.store(
        DX + bh.to(tl.int64) * L * P + r[:, None] * P + f[None, :],
        dt[:, None] * u,
        mask=(r[:, None] < L) & (f[None, :] < P),
    )
    dc = tl.exp(cum)[:, None] * tl.dot(dy, hs, input_precision=TF) + tl.dot(k, b, input_precision=TF)
    db = tl.dot(tl.trans(k), cc, input_precision=TF) + (e * dt)[:, None] * tl.dot(x, ds, input_precision=TF)
    nmask = (r[:, None] < L) & (f[None, :] < N)
    tl.store(DC + bh.to(tl.int64) * L * N + r[:, None] * N + f[None, :], dc, mask=nmask)
    tl.store(DB + bh.to(tl.int64) * L * N + r[:, None] * N + f[None, :], db, mask=nmask)
    v = k * cb
    xbd = e * dt * tl.sum(x * bd, 1)  # (C,): the chunk-state path
    d_cum = (
        tl.exp(cum) * tl.sum(dy * tl.dot(cc, tl.trans(hs), input_precision=TF), 1) + tl.sum(v, 1) - tl.sum(v, 0) - xbd
    )
    d_last = tl.sum(xbd, 0) + tl.exp(last) * tl.sum(tl.sum(ds * hs, 1), 0)
    # A_t = sum_{r <= t} dt_r a and A_last = sum_r dt_r a: d(dt_r a) = sum_{t >= r} d_cum_t + d_last
    suffix = tl.sum(d_cum, 0) - tl.cumsum(d_cum, 0) + d_cum + d_last
    ddt = tl.sum(x * u, 1) + tl.load(A + head) * suffix
    tl.store(DDT + bh.to(tl.int64) * L + r, ddt, mask=r < L)
    tl.store(DA + row, tl.sum(dt * suffix, 0))
