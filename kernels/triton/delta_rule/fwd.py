"""Forward kernels of the chunked gated delta rule (algorithm, shapes and layout: ``__init__.py``).

The launcher pads everything (``LP`` positions = whole chunks, keys to ``KR`` columns, values to ``VR``), so the
kernels load without masks; a padded position has ``k = 0, beta = 0, g = 0`` (no update, no decay), a padded
column is zero throughout. ``[C, C]`` tiles hold position pairs ``[t, s]`` of one chunk, ``[C, KR]`` its keys
(the key width is a constexpr: one tile), values are walked in blocks of ``BV`` columns.
"""

from __future__ import annotations

import triton
import triton.language as tl

TF = tl.constexpr("tf32x3")  # ~fp32 accuracy on tensor cores (as kernels/triton/linear_attention.py)
# Integer sizes: no value specialisation, so a launch compiles what kernels.tools.aot_check does.
NO_SPEC = ["LP", "VR", "n_c", "HAS_H0", "HAS_DHF"]


@triton.jit
def _decays(Gp, row0, rows):
    """``G_t = sum_{r <= t} g_r`` inside the chunk whose first row (in the flat ``[B h LP]`` layout) is ``row0``,
    and the chunk's total ``G_end`` (the decay across the whole chunk)."""
    g = tl.load(Gp + row0 + rows)
    return tl.cumsum(g, 0), tl.sum(g, 0)


@triton.jit
def _gamma(Gc, rows):
    """``[C, C]``: ``exp(G_t - G_s)`` for ``s <= t``, else 0 (the exponent masked first: it is > 0 above)."""
    tri = rows[None, :] <= rows[:, None]
    return tl.where(tri, tl.exp(tl.where(tri, Gc[:, None] - Gc[None, :], 0.0)), 0.0)


@triton.jit
def _unit_lower_inverse(a, rows, C: tl.constexpr):
    """``(I + a)^{-1}`` of a strictly lower ``a [C, C]``, by forward substitution on ``X = T - I``:
    ``X[i] = -a[i] + sum_{j < i} (-a[i, j]) X[j]`` (rows ``j >= i`` of ``X`` are still zero)."""
    x = tl.zeros([C, C], dtype=tl.float32)
    for i in range(1, C):
        ai = -tl.sum(tl.where(rows[:, None] == i, a, 0.0), 0)  # (C,): row i of -a
        xi = ai + tl.sum(ai[:, None] * x, 0)
        x = tl.where(rows[:, None] == i, xi[None, :], x)
    return x + tl.where(rows[:, None] == rows[None, :], 1.0, 0.0)


@triton.jit(do_not_specialize=NO_SPEC)
def _delta_chunk_prep(Kp, Vp, BETA, Gp, Tm, W, U0, LP, VR, C: tl.constexpr, KR: tl.constexpr, BV: tl.constexpr):
    """Per chunk: ``T = (I + strict_lower(diag(beta) K K^T o Gam))^{-1}`` (stored, the backward reuses it),
    ``w = T diag(beta e^G) K`` and ``u0 = T diag(beta) V``."""
    c = tl.program_id(0)
    bh = tl.program_id(1)
    n_c = tl.num_programs(0)
    rows = tl.arange(0, C)
    row0 = bh.to(tl.int64) * LP + c * C  # first row of the chunk in the flat [B h LP] layout
    r = row0 + rows
    fk = tl.arange(0, KR)
    k = tl.load(Kp + r[:, None] * KR + fk[None, :])  # (C, KR)
    beta = tl.load(BETA + r)
    Gc, _ = _decays(Gp, row0, rows)
    strict = rows[None, :] < rows[:, None]
    a = tl.where(strict, tl.dot(k * beta[:, None], tl.trans(k), input_precision=TF) * _gamma(Gc, rows), 0.0)
    t = _unit_lower_inverse(a, rows, C)
    tl.store(Tm + (bh.to(tl.int64) * n_c + c) * C * C + rows[:, None] * C + rows[None, :], t)
    w = tl.dot(t, k * (beta * tl.exp(Gc))[:, None], input_precision=TF)  # (C, KR)
    tl.store(W + r[:, None] * KR + fk[None, :], w)
    for v0 in range(0, VR, BV):
        fv = v0 + tl.arange(0, BV)
        vb = tl.load(Vp + r[:, None] * VR + fv[None, :]) * beta[:, None]  # (C, BV)
        tl.store(U0 + r[:, None] * VR + fv[None, :], tl.dot(t, vb, input_precision=TF))


@triton.jit(do_not_specialize=NO_SPEC)
def _delta_state_fwd(
    Kp,
    Gp,
    W,
    U0,
    UU,
    HS,
    H0,
    HF,
    LP,
    VR,
    n_c,
    HAS_H0,
    C: tl.constexpr,
    KR: tl.constexpr,
    BV: tl.constexpr,
):
    """Sequential over the chunks, one program per (block of ``BV`` value columns, batch x head), the state block
    ``S [KR, BV]`` in registers: stores ``HS_c = S`` (the state chunk c starts from), ``U = u0 - w S`` and moves
    ``S <- e^{G_end} S + (diag(e^{G_end - G}) K)^T U``; the final state to ``HF``."""
    vb = tl.program_id(0)
    bh = tl.program_id(1)
    rows = tl.arange(0, C)
    fk = tl.arange(0, KR)
    fv = vb * BV + tl.arange(0, BV)
    blk = fk[:, None] * VR + fv[None, :]  # (KR, BV) offsets inside one [KR, VR] state
    s = tl.zeros([KR, BV], dtype=tl.float32)
    if HAS_H0 != 0:  # a run-time flag: one compiled kernel with and without the initial state
        s = tl.load(H0 + bh.to(tl.int64) * KR * VR + blk)
    for c in range(0, n_c):
        tl.store(HS + (bh.to(tl.int64) * n_c + c) * KR * VR + blk, s)
        row0 = bh.to(tl.int64) * LP + c * C
        r = row0 + rows
        w = tl.load(W + r[:, None] * KR + fk[None, :])  # (C, KR)
        u = tl.load(U0 + r[:, None] * VR + fv[None, :]) - tl.dot(w, s, input_precision=TF)  # (C, BV)
        tl.store(UU + r[:, None] * VR + fv[None, :], u)
        Gc, end = _decays(Gp, row0, rows)
        kd = tl.load(Kp + r[:, None] * KR + fk[None, :]) * tl.exp(end - Gc)[:, None]  # keys decayed to the end
        s = tl.exp(end) * s + tl.dot(tl.trans(kd), u, input_precision=TF)
    tl.store(HF + bh.to(tl.int64) * KR * VR + blk, s)


@triton.jit(do_not_specialize=NO_SPEC)
def _delta_chunk_out(Qp, Kp, Gp, UU, HS, O, LP, VR, C: tl.constexpr, KR: tl.constexpr, BV: tl.constexpr):
    """Per chunk: ``O = diag(e^G) Q S0 + (Q K^T o Gam_incl) U``."""
    c = tl.program_id(0)
    bh = tl.program_id(1)
    rows = tl.arange(0, C)
    row0 = bh.to(tl.int64) * LP + c * C
    r = row0 + rows
    fk = tl.arange(0, KR)
    q = tl.load(Qp + r[:, None] * KR + fk[None, :])  # (C, KR)
    k = tl.load(Kp + r[:, None] * KR + fk[None, :])
    Gc, _ = _decays(Gp, row0, rows)
    attn = tl.dot(q, tl.trans(k), input_precision=TF) * _gamma(Gc, rows)  # (C, C)
    qg = q * tl.exp(Gc)[:, None]
    hs = HS + (bh.to(tl.int64) * tl.num_programs(0) + c) * KR * VR
    for v0 in range(0, VR, BV):
        fv = v0 + tl.arange(0, BV)
        s0 = tl.load(hs + fk[:, None] * VR + fv[None, :])  # (KR, BV)
        o = tl.dot(qg, s0, input_precision=TF) + tl.dot(
            attn, tl.load(UU + r[:, None] * VR + fv[None, :]), input_precision=TF
        )
        tl.store(O + r[:, None] * VR + fv[None, :], o)
