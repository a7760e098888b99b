"""Backward kernels of the chunked gated delta rule (the layout: ``fwd.py``; the algorithm: ``__init__.py``).

Per chunk the forward is ``U = u0 - w S0``, ``O = diag(e^G) Q S0 + (Q K^T o Gam_incl) U``, ``S1 = e^{G_end} S0 +
Kd^T U`` with ``Kd = diag(e^{G_end - G}) K``, ``u0 = T diag(beta) V``, ``w = T W0``, ``W0 = diag(beta e^G) K``,
``T = (I + A)^{-1}``, ``A = strict_lower(diag(beta) K K^T o Gam)``. Given ``dO`` and ``dS1`` (the gradient of the
state the chunk leaves):

- ``_delta_state_bwd`` (sequential, last chunk first): ``dU = (Q K^T o Gam_incl)^T dO + Kd dS1`` and
  ``dS0 = (diag(e^G) Q)^T dO + e^{G_end} dS1 - w^T dU``, which is the previous chunk's ``dS1``; stores every
  chunk's ``dS1`` and ``dU``, and the initial state's gradient;
- ``_delta_chunk_bwd`` (per chunk): ``dw = -dU S0^T``, ``dT = dU (diag(beta) V)^T + dw W0^T``,
  ``dV = diag(beta) T^T dU``, ``dW0 = T^T dw``, ``dA = strict_lower(-T^T dT T^T)``; then dq, dk, dbeta by the
  product rule through ``W0``, ``Q K^T o Gam_incl``, ``Kd``, ``A``, and the gradient of each cumulative decay
  ``G_t`` (every ``exp(G_t - G_s)`` gives ``+E`` to ``t`` and ``-E`` to ``s``, ``E`` the product of the entry
  with its gradient), handed to ``g`` as in-chunk suffix sums (``G_t = sum_{r <= t} g_r``, ``G_end = sum g``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .fwd import NO_SPEC, TF, _decays, _gamma


@triton.jit(do_not_specialize=NO_SPEC)
def _delta_state_bwd(
    Qp,
    Kp,
    Gp,
    W,
    DO,
    DU,
    DS,
    DHF,
    DH0,
    LP,
    VR,
    n_c,
    HAS_DHF,
    C: tl.constexpr,
    KR: tl.constexpr,
    BV: tl.constexpr,
):
    """Reverse over the chunks from ``dS`` of the final state (``DHF`` or zeros), a ``[KR, BV]`` block in
    registers: ``DS_c = dS1`` of chunk c, ``DU`` its ``dU``, then ``dS <- dS0``; the last one to ``DH0``."""
    vb = tl.program_id(0)
    bh = tl.program_id(1)
    rows = tl.arange(0, C)
    fk = tl.arange(0, KR)
    fv = vb * BV + tl.arange(0, BV)
    blk = fk[:, None] * VR + fv[None, :]
    d = tl.zeros([KR, BV], dtype=tl.float32)
    if HAS_DHF != 0:  # a run-time flag, as HAS_H0 in fwd.py
        d = tl.load(DHF + bh.to(tl.int64) * KR * VR + blk)
    for i in range(0, n_c):
        c = n_c - 1 - i
        tl.store(DS + (bh.to(tl.int64) * n_c + c) * KR * VR + blk, d)
        row0 = bh.to(tl.int64) * LP + c * C
        r = row0 + rows
        q = tl.load(Qp + r[:, None] * KR + fk[None, :])  # (C, KR)
        k = tl.load(Kp + r[:, None] * KR + fk[None, :])
        Gc, end = _decays(Gp, row0, rows)
        attn = tl.dot(q, tl.trans(k), input_precision=TF) * _gamma(Gc, rows)  # (C, C)
        do = tl.load(DO + r[:, None] * VR + fv[None, :])  # (C, BV)
        kd = k * tl.exp(end - Gc)[:, None]
        du = tl.dot(tl.trans(attn), do, input_precision=TF) + tl.dot(kd, d, input_precision=TF)
        tl.store(DU + r[:, None] * VR + fv[None, :], du)
        w = tl.load(W + r[:, None] * KR + fk[None, :])
        d = (
            tl.dot(tl.trans(q * tl.exp(Gc)[:, None]), do, input_precision=TF)
            + tl.exp(end) * d
            - tl.dot(tl.trans(w), du, input_precision=TF)
        )
    tl.store(DH0 + bh.to(tl.int64) * KR * VR + blk, d)


@triton.jit(do_not_specialize=NO_SPEC)
def _delta_chunk_bwd(
    Qp,
    Kp,
    Vp,
    BETA,
    Gp,
    Tm,
    UU,
    HS,
    DS,
    DO,
    DU,
    DQ,
    DK,
    DV,
    DBETA,
    DG,
    LP,
    VR,
    C: tl.constexpr,
    KR: tl.constexpr,
    BV: tl.constexpr,
):
    """dq, dk, dv, dbeta and dg of one chunk (formulas: the module docstring), the values in blocks of ``BV``."""
    c = tl.program_id(0)
    bh = tl.program_id(1)
    n_c = tl.num_programs(0)
    rows = tl.arange(0, C)
    row0 = bh.to(tl.int64) * LP + c * C
    r = row0 + rows
    fk = tl.arange(0, KR)
    tile = r[:, None] * KR + fk[None, :]
    q = tl.load(Qp + tile)  # (C, KR)
    k = tl.load(Kp + tile)
    beta = tl.load(BETA + r)
    Gc, end = _decays(Gp, row0, rows)
    eG = tl.exp(Gc)
    gam = _gamma(Gc, rows)  # (C, C), zero above the diagonal
    t = tl.load(Tm + (bh.to(tl.int64) * n_c + c) * C * C + rows[:, None] * C + rows[None, :])
    w0 = k * (beta * eG)[:, None]
    hs = HS + (bh.to(tl.int64) * n_c + c) * KR * VR
    ds = DS + (bh.to(tl.int64) * n_c + c) * KR * VR
    dqs = tl.zeros([C, KR], dtype=tl.float32)  # dO S0^T
    dattn = tl.zeros([C, C], dtype=tl.float32)  # dO U^T
    dkd = tl.zeros([C, KR], dtype=tl.float32)  # U dS1^T
    dw = tl.zeros([C, KR], dtype=tl.float32)  # -dU S0^T
    dt = tl.zeros([C, C], dtype=tl.float32)  # dU (diag(beta) V)^T, then + dw W0^T
    dbeta = tl.zeros([C], dtype=tl.float32)
    s0ds1 = tl.zeros([KR], dtype=tl.float32)  # rows of <S0, dS1>
    for v0 in range(0, VR, BV):
        fv = v0 + tl.arange(0, BV)
        vt = r[:, None] * VR + fv[None, :]
        do = tl.load(DO + vt)  # (C, BV)
        u = tl.load(UU + vt)
        du = tl.load(DU + vt)
        v = tl.load(Vp + vt)
        s0 = tl.load(hs + fk[:, None] * VR + fv[None, :])  # (KR, BV)
        s1 = tl.load(ds + fk[:, None] * VR + fv[None, :])
        dqs += tl.dot(do, tl.trans(s0), input_precision=TF)
        dattn += tl.dot(do, tl.trans(u), input_precision=TF)
        dkd += tl.dot(u, tl.trans(s1), input_precision=TF)
        s0ds1 += tl.sum(s0 * s1, 1)
        dw -= tl.dot(du, tl.trans(s0), input_precision=TF)
        dt += tl.dot(du, tl.trans(v * beta[:, None]), input_precision=TF)
        tdu = tl.dot(tl.trans(t), du, input_precision=TF)  # (C, BV): d(diag(beta) V)
        tl.store(DV + vt, tdu * beta[:, None])
        dbeta += tl.sum(v * tdu, 1)
    # w = T W0, W0 = diag(beta e^G) K
    dt += tl.dot(dw, tl.trans(w0), input_precision=TF)
    dw0 = tl.dot(tl.trans(t), dw, input_precision=TF)  # (C, KR)
    dk = dw0 * (beta * eG)[:, None]
    dbeta += tl.sum(k * dw0, 1) * eG
    dG = tl.sum(w0 * dw0, 1)
    # diag(e^G) Q S0
    dq = dqs * eG[:, None]
    dG += tl.sum(q * dq, 1)
    # (Q K^T o Gam_incl) U
    p = dattn * gam
    dq += tl.dot(p, k, input_precision=TF)
    dk += tl.dot(tl.trans(p), q, input_precision=TF)
    e1 = p * tl.dot(q, tl.trans(k), input_precision=TF)
    dG += tl.sum(e1, 1) - tl.sum(e1, 0)
    # Kd = diag(e^{G_end - G}) K and e^{G_end} S0
    dec = tl.exp(end - Gc)
    dk += dkd * dec[:, None]
    m = tl.sum(k * dkd, 1) * dec
    dG -= m
    dend = tl.sum(m, 0) + tl.exp(end) * tl.sum(s0ds1, 0)
    # T = (I + A)^{-1}: dA = -T^T dT T^T on the strict lower triangle, A = diag(beta) (K K^T o Gam)
    strict = rows[None, :] < rows[:, None]
    da = tl.where(strict, -tl.dot(tl.trans(t), tl.dot(dt, tl.trans(t), input_precision=TF), input_precision=TF), 0.0)
    kk = tl.dot(k, tl.trans(k), input_precision=TF)
    dbeta += tl.sum(da * kk * gam, 1)
    q2 = da * beta[:, None] * gam
    dk += tl.dot(q2, k, input_precision=TF) + tl.dot(tl.trans(q2), k, input_precision=TF)
    e2 = q2 * kk
    dG += tl.sum(e2, 1) - tl.sum(e2, 0)
    # G_t = sum_{r <= t} g_r and G_end = sum_r g_r: dg_r = sum_{t >= r} dG_t + dG_end
    dg = tl.sum(dG, 0) - tl.cumsum(dG, 0) + dG + dend
    tl.store(DQ + tile, dq)
    tl.store(DK + tile, dk)
    tl.store(DBETA + r, dbeta)
    tl.store(DG + r, dg)
