"""Forward kernels of Mamba-2's chunked SSD (algorithm and shapes: ``kernels/triton/ssd/__init__.py``).

One program per (chunk, batch x head) for the chunk kernels, one per (block of the state, batch x head) for the
sequential pass over the chunks. A chunk program holds ``[C, C]`` tiles (position pairs) and walks the head width
``P`` and the state width ``N`` in blocks of ``BP`` / ``BN`` columns, so its registers depend on the chunk alone
and any ``P``, ``N`` run with the same compiled kernel. The state of a head, ``h[p, n]``, is stored in fp32 as
``[PR, NR]`` (``P``, ``N`` rounded up to the blocks, zero padded), so its blocks load unmasked.
"""

from __future__ import annotations

import triton
import triton.language as tl

TF = tl.constexpr("tf32x3")  # ~fp32 accuracy on tensor cores (as kernels/triton/linear_attention.py)
# Integer sizes: no value specialisation, so a launch compiles what kernels.tools.aot_check does.
NO_SPEC = ["H", "G", "L", "P", "N", "PR", "NR", "n_c", "DD"]


@triton.jit
def _rows(X, r, f, L, W):
    """Rows ``r`` (``[C]``) and columns ``f`` of a row-major ``[L, W]`` fp32 tensor, zero outside."""
    return tl.load(X + r[:, None] * W + f[None, :], mask=(r[:, None] < L) & (f[None, :] < W), other=0.0)


@triton.jit
def _block(S, p0, n0, NR, BP: tl.constexpr, BN: tl.constexpr):
    """The ``[BP, BN]`` block at ``(p0, n0)`` of the padded ``[PR, NR]`` state at ``S``."""
    return tl.load(S + (p0 + tl.arange(0, BP))[:, None] * NR + n0 + tl.arange(0, BN)[None, :])


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


@triton.jit
def _gram(U, V, r, L, W, BW: tl.constexpr, C: tl.constexpr):
    """``U V^T`` (``[C, C]``) of the rows ``r`` of two ``[L, W]`` tensors, over ``W`` in blocks of ``BW``."""
    acc = tl.zeros([C, C], dtype=tl.float32)
    for w0 in range(0, W, BW):
        f = w0 + tl.arange(0, BW)
        acc += tl.dot(_rows(U, r, f, L, W), tl.trans(_rows(V, r, f, L, W)), input_precision=TF)
    return acc


@triton.jit(do_not_specialize=NO_SPEC)
def _ssd_chunk_state(X, DT, A, Bm, S, ACH, H, G, L, P, N, PR, NR, C: tl.constexpr, BP: tl.constexpr, BN: tl.constexpr):
    """Chunk c's own state ``S_c = sum_s exp(A_last - A_s) dt_s x_s b_s^T`` (``[PR, NR]``) and ``A_last``."""
    c = tl.program_id(0)
    bh = tl.program_id(1)
    n_c = tl.num_programs(0)
    head, bg = _heads(bh, H, G)
    r = c * C + tl.arange(0, C)
    dt, cum, last = _chunk_decay(DT, A, bh, head, r, L)
    w = tl.exp(last - cum) * dt  # decay to the chunk's end, times the step
    row = bh.to(tl.int64) * n_c + c
    for p0 in range(0, PR, BP):
        fp = p0 + tl.arange(0, BP)
        xw = tl.trans(_rows(X + bh.to(tl.int64) * L * P, r, fp, L, P) * w[:, None])  # (BP, C)
        for n0 in range(0, NR, BN):
            fn = n0 + tl.arange(0, BN)
            b = _rows(Bm + bg.to(tl.int64) * L * N, r, fn, L, N)  # (C, BN)
            tl.store(S + row * PR * NR + fp[:, None] * NR + fn[None, :], tl.dot(xw, b, input_precision=TF))
    tl.store(ACH + row, last)


@triton.jit(do_not_specialize=NO_SPEC)
def _ssd_state_pass(S, ACH, H0, HS, HF, n_c, DD, HAS_H0: tl.constexpr, BLOCK: tl.constexpr):
    """Sequential over chunks: ``HS_c = h_c`` (the state chunk c starts from), ``h_{c+1} = exp(A_last,c) h_c +
    S_c``, from ``h_0`` (``H0`` or zeros); the final state to ``HF``. ``BLOCK`` of the ``DD`` state entries each."""
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
def _ssd_chunk_scan(
    X, DT, A, Bm, Cm, HS, Y, H, G, L, P, N, PR, NR, C: tl.constexpr, BP: tl.constexpr, BN: tl.constexpr
):
    """``y_t = exp(A_t) h_c c_t + sum_{s <= t in chunk} (c_t . b_s) exp(A_t - A_s) dt_s x_s``, per block of P."""
    c = tl.program_id(0)
    bh = tl.program_id(1)
    head, bg = _heads(bh, H, G)
    rows = tl.arange(0, C)
    r = c * C + rows
    dt, cum, last = _chunk_decay(DT, A, bh, head, r, L)
    bc = Bm + bg.to(tl.int64) * L * N
    cm = Cm + bg.to(tl.int64) * L * N
    m = _gram(cm, bc, r, L, N, BN, C) * _causal_decay(cum, rows) * dt[None, :]  # (C, C) [t, s]
    hs = HS + (bh.to(tl.int64) * tl.num_programs(0) + c) * PR * NR
    for p0 in range(0, PR, BP):
        fp = p0 + tl.arange(0, BP)
        y = tl.dot(m, _rows(X + bh.to(tl.int64) * L * P, r, fp, L, P), input_precision=TF)  # (C, BP)
        for n0 in range(0, NR, BN):  # the carried state read out: exp(A_t) c_t h_c^T
            cce = _rows(cm, r, n0 + tl.arange(0, BN), L, N) * tl.exp(cum)[:, None]
            y += tl.dot(cce, tl.trans(_block(hs, p0, n0, NR, BP, BN)), input_precision=TF)
        tl.store(
            Y + bh.to(tl.int64) * L * P + r[:, None] * P + fp[None, :], y, mask=(r[:, None] < L) & (fp[None, :] < P)
        )
