"""Triton kernels of kernels/linear_attention.py (algorithm and precision notes there).

Imported only when a CUDA tensor (or ``force_triton``) takes the Triton path, so ``import kernels``
and ``import models`` work on machines without triton.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .linear_attention import _pad

# Chunk length and warps, measured with kernels.aot_check: 32-row chunks with 4 warps made ptxas
# spill up to 13.8 KB in the causal dK/dV kernel on sm_80 (64-wide state); 16 rows and 8 warps
# keep every kernel at or under ~1.5 KB (most at 0).
CHUNK = 16
WARPS = 8


@triton.jit
def _kv_totals(KF, V, L, M, D, C: tl.constexpr, MP: tl.constexpr, DP: tl.constexpr):
    """Non-causal state over the whole sequence: ``S = sum_j phi(k_j) v_j^T``, ``z = sum_j phi(k_j)``."""
    rows = tl.arange(0, C)
    fm = tl.arange(0, MP)
    fd = tl.arange(0, DP)
    S = tl.zeros([MP, DP], tl.float32)
    z = tl.zeros([MP], tl.float32)
    for c0 in range(0, L, C):
        r = c0 + rows
        k = tl.load(KF + r[:, None] * M + fm[None, :], mask=(r[:, None] < L) & (fm[None, :] < M),
                    other=0.0).to(tl.float32)
        v = tl.load(V + r[:, None] * D + fd[None, :], mask=(r[:, None] < L) & (fd[None, :] < D),
                    other=0.0).to(tl.float32)
        S += tl.dot(tl.trans(k), v, input_precision="tf32x3")
        z += tl.sum(k, 0)
    return S, z


@triton.jit
def _la_fwd(QF, KF, V, O, DEN, H, GROUP, L, M, D, eps, CAUSAL: tl.constexpr, C: tl.constexpr,
            MP: tl.constexpr, DP: tl.constexpr):
    bh = tl.program_id(0)
    kvh = (bh // H) * (H // GROUP) + (bh % H) // GROUP  # row of [B * h_kv]
    QF += bh.to(tl.int64) * L * M
    O += bh.to(tl.int64) * L * D
    KF += kvh.to(tl.int64) * L * M
    V += kvh.to(tl.int64) * L * D
    rows = tl.arange(0, C)
    fm = tl.arange(0, MP)
    fd = tl.arange(0, DP)
    S = tl.zeros([MP, DP], tl.float32)
    z = tl.zeros([MP], tl.float32)
    if not CAUSAL:
        S, z = _kv_totals(KF, V, L, M, D, C, MP, DP)
    for c0 in range(0, L, C):
        r = c0 + rows
        q = tl.load(QF + r[:, None] * M + fm[None, :], mask=(r[:, None] < L) & (fm[None, :] < M),
                    other=0.0).to(tl.float32)
        num = tl.dot(q, S, input_precision="tf32x3")
        den = tl.sum(q * z[None, :], 1)
        if CAUSAL:
            k = tl.load(KF + r[:, None] * M + fm[None, :], mask=(r[:, None] < L) & (fm[None, :] < M),
                        other=0.0).to(tl.float32)
            v = tl.load(V + r[:, None] * D + fd[None, :], mask=(r[:, None] < L) & (fd[None, :] < D),
                        other=0.0).to(tl.float32)
            a = tl.dot(q, tl.trans(k), input_precision="tf32x3")
            a = tl.where(rows[None, :] <= rows[:, None], a, 0.0)  # (C, C) j <= i
            num += tl.dot(a, v, input_precision="tf32x3")
            den += tl.sum(a, 1)
            S += tl.dot(tl.trans(k), v, input_precision="tf32x3")
            z += tl.sum(k, 0)
        den += eps
        tl.store(O + r[:, None] * D + fd[None, :], (num / den[:, None]).to(O.dtype.element_ty),
                 mask=(r[:, None] < L) & (fd[None, :] < D))
        tl.store(DEN + bh.to(tl.int64) * L + r, den, mask=r < L)


@triton.jit
def _la_bwd_dq(QF, KF, V, O, DO, DEN, DQ, H, GROUP, L, M, D, CAUSAL: tl.constexpr,
               C: tl.constexpr, MP: tl.constexpr, DP: tl.constexpr):
    bh = tl.program_id(0)
    kvh = (bh // H) * (H // GROUP) + (bh % H) // GROUP
    KF += kvh.to(tl.int64) * L * M
    V += kvh.to(tl.int64) * L * D
    rows = tl.arange(0, C)
    fm = tl.arange(0, MP)
    fd = tl.arange(0, DP)
    S = tl.zeros([MP, DP], tl.float32)
    z = tl.zeros([MP], tl.float32)
    if not CAUSAL:
        S, z = _kv_totals(KF, V, L, M, D, C, MP, DP)
    for c0 in range(0, L, C):
        r = c0 + rows
        rd = (r[:, None] < L) & (fd[None, :] < D)
        base = bh.to(tl.int64) * L
        do = tl.load(DO + base * D + r[:, None] * D + fd[None, :], mask=rd, other=0.0).to(tl.float32)
        o = tl.load(O + base * D + r[:, None] * D + fd[None, :], mask=rd, other=0.0).to(tl.float32)
        den = tl.load(DEN + base + r, mask=r < L, other=1.0)
        dnum = do / den[:, None]
        dden = -tl.sum(do * o, 1) / den
        dq = tl.dot(dnum, tl.trans(S), input_precision="tf32x3") + dden[:, None] * z[None, :]
        if CAUSAL:
            k = tl.load(KF + r[:, None] * M + fm[None, :], mask=(r[:, None] < L) & (fm[None, :] < M),
                        other=0.0).to(tl.float32)
            v = tl.load(V + r[:, None] * D + fd[None, :], mask=rd, other=0.0).to(tl.float32)
            g = tl.dot(dnum, tl.trans(v), input_precision="tf32x3") + dden[:, None]
            g = tl.where(rows[None, :] <= rows[:, None], g, 0.0)
            dq += tl.dot(g, k, input_precision="tf32x3")
            S += tl.dot(tl.trans(k), v, input_precision="tf32x3")
            z += tl.sum(k, 0)
        tl.store(DQ + base * M + r[:, None] * M + fm[None, :], dq.to(DQ.dtype.element_ty),
                 mask=(r[:, None] < L) & (fm[None, :] < M))


@triton.jit
def _la_bwd_dkdv(QF, KF, V, O, DO, DEN, DK, DV, H, GROUP, L, M, D, CAUSAL: tl.constexpr,
                 C: tl.constexpr, MP: tl.constexpr, DP: tl.constexpr):
    bkv = tl.program_id(0)
    h_kv = H // GROUP
    b = bkv // h_kv
    KF += bkv.to(tl.int64) * L * M
    V += bkv.to(tl.int64) * L * D
    DK += bkv.to(tl.int64) * L * M
    DV += bkv.to(tl.int64) * L * D
    rows = tl.arange(0, C)
    fm = tl.arange(0, MP)
    fd = tl.arange(0, DP)
    n_chunks = tl.cdiv(L, C)
    for g in range(0, GROUP):  # query heads sharing this K/V head; accumulate in DK / DV
        bh = b * H + (bkv % h_kv) * GROUP + g
        base = bh.to(tl.int64) * L
        R = tl.zeros([MP, DP], tl.float32)
        rr = tl.zeros([MP], tl.float32)
        if not CAUSAL:
            for c0 in range(0, L, C):
                r = c0 + rows
                rd = (r[:, None] < L) & (fd[None, :] < D)
                q = tl.load(QF + base * M + r[:, None] * M + fm[None, :],
                            mask=(r[:, None] < L) & (fm[None, :] < M), other=0.0).to(tl.float32)
                do = tl.load(DO + base * D + r[:, None] * D + fd[None, :], mask=rd, other=0.0).to(tl.float32)
                o = tl.load(O + base * D + r[:, None] * D + fd[None, :], mask=rd, other=0.0).to(tl.float32)
                den = tl.load(DEN + base + r, mask=r < L, other=1.0)
                R += tl.dot(tl.trans(q), do / den[:, None], input_precision="tf32x3")
                rr += tl.sum(q * (-tl.sum(do * o, 1) / den)[:, None], 0)
        for ci in range(0, n_chunks):
            c0 = (n_chunks - 1 - ci) * C  # reverse sweep: R, r hold the later chunks
            r = c0 + rows
            rd = (r[:, None] < L) & (fd[None, :] < D)
            rm = (r[:, None] < L) & (fm[None, :] < M)
            k = tl.load(KF + r[:, None] * M + fm[None, :], mask=rm, other=0.0).to(tl.float32)
            v = tl.load(V + r[:, None] * D + fd[None, :], mask=rd, other=0.0).to(tl.float32)
            # dv is finished and stored before dk starts: fewer [C, *] tiles live at once (ptxas
            # spilled ~10 KB on sm_80 with both accumulators live across the causal block).
            dv = tl.dot(k, R, input_precision="tf32x3")
            if CAUSAL:
                q = tl.load(QF + base * M + r[:, None] * M + fm[None, :], mask=rm, other=0.0).to(tl.float32)
                do = tl.load(DO + base * D + r[:, None] * D + fd[None, :], mask=rd, other=0.0).to(tl.float32)
                o = tl.load(O + base * D + r[:, None] * D + fd[None, :], mask=rd, other=0.0).to(tl.float32)
                den = tl.load(DEN + base + r, mask=r < L, other=1.0)
                dnum = do / den[:, None]
                dden = -tl.sum(do * o, 1) / den
                tri = rows[None, :] >= rows[:, None]  # (j, i): i >= j
                at = tl.where(tri, tl.dot(k, tl.trans(q), input_precision="tf32x3"), 0.0)
                dv += tl.dot(at, dnum, input_precision="tf32x3")
            if g > 0:
                dv += tl.load(DV + r[:, None] * D + fd[None, :], mask=rd, other=0.0).to(tl.float32)
            tl.store(DV + r[:, None] * D + fd[None, :], dv.to(DV.dtype.element_ty), mask=rd)
            dk = tl.dot(v, tl.trans(R), input_precision="tf32x3") + rr[None, :]
            if CAUSAL:
                gt = tl.dot(v, tl.trans(dnum), input_precision="tf32x3") + dden[None, :]
                gt = tl.where(tri, gt, 0.0)
                dk += tl.dot(gt, q, input_precision="tf32x3")
                R += tl.dot(tl.trans(q), dnum, input_precision="tf32x3")
                rr += tl.sum(q * dden[:, None], 0)
            if g > 0:
                dk += tl.load(DK + r[:, None] * M + fm[None, :], mask=rm, other=0.0).to(tl.float32)
            tl.store(DK + r[:, None] * M + fm[None, :], dk.to(DK.dtype.element_ty), mask=rm)


def _meta(m, d):
    p = _pad(m, d)
    return dict(C=CHUNK, MP=p, DP=p, num_warps=WARPS)


class _LinearAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qf, kf, v, causal, eps):
        B, h, L, m = qf.shape
        h_kv, d = kf.shape[1], v.shape[-1]
        qf, kf, v = qf.contiguous(), kf.contiguous(), v.contiguous()
        o = torch.empty(B, h, L, d, dtype=v.dtype, device=v.device)
        den = torch.empty(B, h, L, dtype=torch.float32, device=v.device)  # (B, h, L)
        _la_fwd[(B * h,)](qf, kf, v, o, den, h, h // h_kv, L, m, d, eps, CAUSAL=causal,
                          **_meta(m, d))
        ctx.save_for_backward(qf, kf, v, o, den)
        ctx.causal = causal
        return o

    @staticmethod
    def backward(ctx, do):
        qf, kf, v, o, den = ctx.saved_tensors
        B, h, L, m = qf.shape
        h_kv, d = kf.shape[1], v.shape[-1]
        do = do.contiguous()
        dq, dk, dv = torch.empty_like(qf), torch.empty_like(kf), torch.empty_like(v)
        meta = _meta(m, d)
        _la_bwd_dq[(B * h,)](qf, kf, v, o, do, den, dq, h, h // h_kv, L, m, d, CAUSAL=ctx.causal,
                             **meta)
        _la_bwd_dkdv[(B * h_kv,)](qf, kf, v, o, do, den, dk, dv, h, h // h_kv, L, m, d,
                                  CAUSAL=ctx.causal, **meta)
        return dq, dk, dv, None, None


def aot_specs(quick: bool):
    """Specialisations kernels.aot_check compiles (padded dims 32 and 64; fp32 only)."""
    out = []
    for tt in ("fp32",):
        for mp, dp in (((64, 64),) if quick else ((32, 32), (64, 64))):
            ptrs = {n: "*" + tt for n in ("QF", "KF", "V", "O", "DO", "DQ", "DK", "DV")}
            ptrs["DEN"] = "*fp32"
            for causal in (False, True):
                consts = {"CAUSAL": causal, "C": CHUNK, "MP": mp, "DP": dp}
                for fn in (_la_fwd, _la_bwd_dq, _la_bwd_dkdv):
                    out.append((f"{fn.__name__} {tt} m{mp} d{dp} causal={causal}", fn, ptrs,
                                consts, WARPS, 2))
    return out
