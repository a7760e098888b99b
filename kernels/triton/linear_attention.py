"""Triton kernels of kernels/linear_attention.py: a chunk-parallel scan (algorithm there).

Imported only when a CUDA tensor (or ``force_triton``) takes the Triton path, so ``import kernels``
and ``import models`` work on machines without triton.

Chunk-parallel instead of one program per (batch, head): a sequential sweep runs ``B * h``
programs, far fewer than an H100's 132 SMs at batch 1, each walking the whole sequence. Here every
kernel has one program per (chunk, batch * head):
1. ``_la_chunk_kv``: per chunk its state increment ``dS_c = K_c^T V_c`` and ``dz_c = colsum K_c``;
2. torch: exclusive prefix sums over the chunks (causal) or the total (non-causal): the state
   ``S_c, z_c`` seen by chunk c (``[B h_kv, n_c, MP, DP]``, fp32; ``torch.cumsum``: deterministic);
3. ``_la_fwd_chunk``: ``num = Q_c S_c + tril(Q_c K_c^T) V_c``, ``den = Q_c z_c + rowsum tril(...) + eps``.
Backward, the same shape: ``_la_bwd_dq_chunk`` reads the recomputed ``S_c, z_c``;
``_la_chunk_grad`` gives per chunk and query head ``dR_c = Q_c^T dnum_c``, ``dr_c = Q_c^T dden_c``,
summed over the GQA group and suffix-summed over later chunks in torch; ``_la_bwd_dkdv_chunk``
adds the intra-chunk terms of every query head of the group. The scan buffers hold
``n_c * MP * DP`` floats per head: ``CHUNK`` trades them against intra-chunk work.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .grid_limits import batch_slices

# Chunk length and warps, measured with kernels.tools.aot_check on sm_80 / sm_90: 16-row chunks with 8
# warps compile every kernel without spills; 32 rows with 4 warps spilled up to 5 KB in the
# causal dK/dV kernel (64-wide state) with ptxas falling back to 32 registers.
CHUNK = 16
WARPS = 8
TF = tl.constexpr("tf32x3")  # ~fp32 accuracy on tensor cores: the running sums need it
# Integer sizes and flags: no value specialisation, so a launch compiles what aot_check does.
NO_SPEC = ["H", "GROUP", "L", "M", "D", "s_chunk"]
# Feature / value dims the Triton path takes (padded to 32 or 64); wider ones use the torch path.
MAX_PAD = 64


def padded_dim(m: int, d: int) -> int:
    """One padded size for both feature and value dims: exactly the AOT-compiled variants."""
    return max(32, 1 << (max(m, d) - 1).bit_length())


def unsupported_reason(phi_q, v) -> str | None:
    """Why these kernels cannot run these arguments (None if they can). For the dispatcher."""
    if padded_dim(phi_q.shape[-1], v.shape[-1]) > MAX_PAD:
        return f"feature / value dims {phi_q.shape[-1]} / {v.shape[-1]} above {MAX_PAD}"
    return None


@triton.jit
def _rows(P, r, f, L, W, WP: tl.constexpr):
    """Rows ``r`` (``[C]``) of a row-major ``[L, W]`` fp32 tensor, padded to ``WP`` columns."""
    return tl.load(P + r[:, None] * W + f[None, :], mask=(r[:, None] < L) & (f[None, :] < W), other=0.0).to(tl.float32)


@triton.jit(do_not_specialize=NO_SPEC)
def _la_chunk_kv(KF, V, DS, DZ, L, M, D, C: tl.constexpr, MP: tl.constexpr, DP: tl.constexpr):
    c = tl.program_id(0)
    bkv = tl.program_id(1)
    n_c = tl.num_programs(0)
    r = c * C + tl.arange(0, C)
    fm = tl.arange(0, MP)
    fd = tl.arange(0, DP)
    k = _rows(KF + bkv.to(tl.int64) * L * M, r, fm, L, M, MP)  # (C, MP)
    v = _rows(V + bkv.to(tl.int64) * L * D, r, fd, L, D, DP)  # (C, DP)
    row = bkv.to(tl.int64) * n_c + c
    tl.store(DS + row * MP * DP + fm[:, None] * DP + fd[None, :], tl.dot(tl.trans(k), v, input_precision=TF))
    tl.store(DZ + row * MP + fm, tl.sum(k, 0))


@triton.jit(do_not_specialize=NO_SPEC)
def _la_fwd_chunk(
    QF,
    KF,
    V,
    S,
    Z,
    O,
    DEN,
    H,
    GROUP,
    L,
    M,
    D,
    s_chunk,
    eps,
    CAUSAL: tl.constexpr,
    C: tl.constexpr,
    MP: tl.constexpr,
    DP: tl.constexpr,
):
    c = tl.program_id(0)
    bh = tl.program_id(1)
    kvh = (bh // H) * (H // GROUP) + (bh % H) // GROUP  # row of [B * h_kv]
    rows = tl.arange(0, C)
    r = c * C + rows
    fm = tl.arange(0, MP)
    fd = tl.arange(0, DP)
    # State rows per K/V head: n_c (causal prefix per chunk) or 1 (non-causal total, s_chunk 0).
    srow = kvh.to(tl.int64) * (1 + (tl.num_programs(0) - 1) * s_chunk) + c * s_chunk
    s = tl.load(S + srow * MP * DP + fm[:, None] * DP + fd[None, :])  # (MP, DP)
    z = tl.load(Z + srow * MP + fm)
    q = _rows(QF + bh.to(tl.int64) * L * M, r, fm, L, M, MP)
    num = tl.dot(q, s, input_precision=TF)
    den = tl.sum(q * z[None, :], 1)
    if CAUSAL:
        k = _rows(KF + kvh.to(tl.int64) * L * M, r, fm, L, M, MP)
        v = _rows(V + kvh.to(tl.int64) * L * D, r, fd, L, D, DP)
        a = tl.dot(q, tl.trans(k), input_precision=TF)
        a = tl.where(rows[None, :] <= rows[:, None], a, 0.0)  # (C, C) j <= i
        num += tl.dot(a, v, input_precision=TF)
        den += tl.sum(a, 1)
    den += eps
    tl.store(
        O + bh.to(tl.int64) * L * D + r[:, None] * D + fd[None, :],
        num / den[:, None],
        mask=(r[:, None] < L) & (fd[None, :] < D),
    )
    tl.store(DEN + bh.to(tl.int64) * L + r, den, mask=r < L)


@triton.jit
def _dnum_dden(O, DO, DEN, bh, r, fd, L, D, DP: tl.constexpr):
    """``dnum = dout / den`` (C, DP) and ``dden = -rowsum(dout * out) / den`` (C) of rows ``r``."""
    do = _rows(DO + bh.to(tl.int64) * L * D, r, fd, L, D, DP)
    o = _rows(O + bh.to(tl.int64) * L * D, r, fd, L, D, DP)
    den = tl.load(DEN + bh.to(tl.int64) * L + r, mask=r < L, other=1.0)
    return do / den[:, None], -tl.sum(do * o, 1) / den


@triton.jit(do_not_specialize=NO_SPEC)
def _la_bwd_dq_chunk(
    QF,
    KF,
    V,
    O,
    DO,
    DEN,
    S,
    Z,
    DQ,
    H,
    GROUP,
    L,
    M,
    D,
    s_chunk,
    CAUSAL: tl.constexpr,
    C: tl.constexpr,
    MP: tl.constexpr,
    DP: tl.constexpr,
):
    c = tl.program_id(0)
    bh = tl.program_id(1)
    kvh = (bh // H) * (H // GROUP) + (bh % H) // GROUP
    rows = tl.arange(0, C)
    r = c * C + rows
    fm = tl.arange(0, MP)
    fd = tl.arange(0, DP)
    srow = kvh.to(tl.int64) * (1 + (tl.num_programs(0) - 1) * s_chunk) + c * s_chunk
    s = tl.load(S + srow * MP * DP + fm[:, None] * DP + fd[None, :])
    z = tl.load(Z + srow * MP + fm)
    dnum, dden = _dnum_dden(O, DO, DEN, bh, r, fd, L, D, DP)
    dq = tl.dot(dnum, tl.trans(s), input_precision=TF) + dden[:, None] * z[None, :]
    if CAUSAL:
        k = _rows(KF + kvh.to(tl.int64) * L * M, r, fm, L, M, MP)
        v = _rows(V + kvh.to(tl.int64) * L * D, r, fd, L, D, DP)
        g = tl.dot(dnum, tl.trans(v), input_precision=TF) + dden[:, None]
        g = tl.where(rows[None, :] <= rows[:, None], g, 0.0)
        dq += tl.dot(g, k, input_precision=TF)
    tl.store(DQ + bh.to(tl.int64) * L * M + r[:, None] * M + fm[None, :], dq, mask=(r[:, None] < L) & (fm[None, :] < M))


@triton.jit(do_not_specialize=NO_SPEC)
def _la_chunk_grad(QF, O, DO, DEN, DR, DRR, L, M, D, C: tl.constexpr, MP: tl.constexpr, DP: tl.constexpr):
    """Per chunk and query head: ``dR_c = Q_c^T dnum_c`` and ``dr_c = Q_c^T dden_c``."""
    c = tl.program_id(0)
    bh = tl.program_id(1)
    n_c = tl.num_programs(0)
    r = c * C + tl.arange(0, C)
    fm = tl.arange(0, MP)
    fd = tl.arange(0, DP)
    q = _rows(QF + bh.to(tl.int64) * L * M, r, fm, L, M, MP)
    dnum, dden = _dnum_dden(O, DO, DEN, bh, r, fd, L, D, DP)
    row = bh.to(tl.int64) * n_c + c
    tl.store(DR + row * MP * DP + fm[:, None] * DP + fd[None, :], tl.dot(tl.trans(q), dnum, input_precision=TF))
    tl.store(DRR + row * MP + fm, tl.sum(q * dden[:, None], 0))


@triton.jit(do_not_specialize=NO_SPEC)
def _la_bwd_dkdv_chunk(
    QF,
    KF,
    V,
    O,
    DO,
    DEN,
    R,
    RR,
    DK,
    DV,
    H,
    GROUP,
    L,
    M,
    D,
    s_chunk,
    CAUSAL: tl.constexpr,
    C: tl.constexpr,
    MP: tl.constexpr,
    DP: tl.constexpr,
):
    c = tl.program_id(0)
    bkv = tl.program_id(1)
    h_kv = H // GROUP
    rows = tl.arange(0, C)
    r = c * C + rows
    fm = tl.arange(0, MP)
    fd = tl.arange(0, DP)
    srow = bkv.to(tl.int64) * (1 + (tl.num_programs(0) - 1) * s_chunk) + c * s_chunk
    R_ = tl.load(R + srow * MP * DP + fm[:, None] * DP + fd[None, :])  # later chunks, whole group
    rr = tl.load(RR + srow * MP + fm)
    k = _rows(KF + bkv.to(tl.int64) * L * M, r, fm, L, M, MP)
    v = _rows(V + bkv.to(tl.int64) * L * D, r, fd, L, D, DP)
    dv = tl.dot(k, R_, input_precision=TF)
    dk = tl.dot(v, tl.trans(R_), input_precision=TF) + rr[None, :]
    if CAUSAL:
        tri = rows[None, :] >= rows[:, None]  # (j, i): i >= j
        for g in range(0, GROUP):  # intra-chunk terms of every query head reading this K/V head
            bh = (bkv // h_kv) * H + (bkv % h_kv) * GROUP + g
            q = _rows(QF + bh.to(tl.int64) * L * M, r, fm, L, M, MP)
            dnum, dden = _dnum_dden(O, DO, DEN, bh, r, fd, L, D, DP)
            at = tl.where(tri, tl.dot(k, tl.trans(q), input_precision=TF), 0.0)
            dv += tl.dot(at, dnum, input_precision=TF)
            gt = tl.where(tri, tl.dot(v, tl.trans(dnum), input_precision=TF) + dden[None, :], 0.0)
            dk += tl.dot(gt, q, input_precision=TF)
    tl.store(
        DV + bkv.to(tl.int64) * L * D + r[:, None] * D + fd[None, :], dv, mask=(r[:, None] < L) & (fd[None, :] < D)
    )
    tl.store(
        DK + bkv.to(tl.int64) * L * M + r[:, None] * M + fm[None, :], dk, mask=(r[:, None] < L) & (fm[None, :] < M)
    )


def _meta(m, d):
    p = padded_dim(m, d)
    return dict(C=CHUNK, MP=p, DP=p, num_warps=WARPS)


def _scan(inc: torch.Tensor, causal: bool, reverse: bool = False):
    """State each chunk sees from the per-chunk increments ``inc [rows, n_c, ...]``: the exclusive
    prefix sum (suffix sum with ``reverse``) when causal, else the total (one chunk, stride 0)."""
    if not causal:
        return inc.sum(1, keepdim=True).contiguous(), 0
    if reverse:
        inc = inc.flip(1)
    out = torch.cumsum(inc, 1) - inc  # exclusive: chunk c sees chunks before it
    return (out.flip(1) if reverse else out).contiguous(), 1


def _kv_state(kf, v, causal, meta):
    """``S_c [B h_kv, n_c or 1, MP, DP]``, ``z_c [B h_kv, n_c or 1, MP]`` and the chunk stride."""
    B, h_kv, L, m = kf.shape
    d, p, n_c = v.shape[-1], meta["MP"], triton.cdiv(L, meta["C"])
    ds = torch.empty(B * h_kv, n_c, p, p, dtype=torch.float32, device=v.device)
    dz = torch.empty(B * h_kv, n_c, p, dtype=torch.float32, device=v.device)
    _la_chunk_kv[(n_c, B * h_kv)](kf, v, ds, dz, L, m, d, **meta)
    (s, stride), (z, _) = _scan(ds, causal), _scan(dz, causal)
    return s, z, stride


class _LinearAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qf, kf, v, causal, eps):
        B, h, L, m = qf.shape
        h_kv, d = kf.shape[1], v.shape[-1]
        qf, kf, v = qf.contiguous(), kf.contiguous(), v.contiguous()
        meta = _meta(m, d)
        s, z, stride = _kv_state(kf, v, causal, meta)
        o = torch.empty(B, h, L, d, dtype=v.dtype, device=v.device)
        den = torch.empty(B, h, L, dtype=torch.float32, device=v.device)  # (B, h, L)
        _la_fwd_chunk[(triton.cdiv(L, meta["C"]), B * h)](
            qf, kf, v, s, z, o, den, h, h // h_kv, L, m, d, stride, eps, CAUSAL=causal, **meta
        )
        ctx.save_for_backward(qf, kf, v, o, den)  # S_c is recomputed: one cheap kernel
        ctx.causal = causal
        return o

    @staticmethod
    def backward(ctx, do):
        qf, kf, v, o, den = ctx.saved_tensors
        causal = ctx.causal
        B, h, L, m = qf.shape
        h_kv, d = kf.shape[1], v.shape[-1]
        do = do.contiguous()
        meta = _meta(m, d)
        n_c, p, group = triton.cdiv(L, meta["C"]), meta["MP"], h // h_kv
        dq, dk, dv = torch.empty_like(qf), torch.empty_like(kf), torch.empty_like(v)
        s, z, stride = _kv_state(kf, v, causal, meta)
        _la_bwd_dq_chunk[(n_c, B * h)](
            qf, kf, v, o, do, den, s, z, dq, h, group, L, m, d, stride, CAUSAL=causal, **meta
        )
        dr = torch.empty(B * h, n_c, p, p, dtype=torch.float32, device=v.device)
        drr = torch.empty(B * h, n_c, p, dtype=torch.float32, device=v.device)
        _la_chunk_grad[(n_c, B * h)](qf, o, do, den, dr, drr, L, m, d, **meta)
        # (B h, n_c, ...) -> (B h_kv, n_c, ...): the group's heads share K / V; fixed-order sum.
        dr = dr.view(B * h_kv, group, n_c, p, p).sum(1)
        drr = drr.view(B * h_kv, group, n_c, p).sum(1)
        (R, stride), (rr, _) = _scan(dr, causal, reverse=True), _scan(drr, causal, reverse=True)
        _la_bwd_dkdv_chunk[(n_c, B * h_kv)](
            qf, kf, v, o, do, den, R, rr, dk, dv, h, group, L, m, d, stride, CAUSAL=causal, **meta
        )
        return dq, dk, dv, None, None


def linear_attention_triton(phi_q, phi_k, v, *, causal: bool, eps: float):
    """:func:`kernels.linear_attention.linear_attention` in these kernels, computed in fp32 (a batch
    with ``B * h > 65535`` as several launches: grid y is ``B * h``, at most 65535 on CUDA)."""
    outs = [
        _LinearAttention.apply(phi_q[s].float(), phi_k[s].float(), v[s].float(), bool(causal), float(eps))
        for s in batch_slices(phi_q.shape[0], phi_q.shape[1])
    ]
    return (outs[0] if len(outs) == 1 else torch.cat(outs, 0)).to(v.dtype)


def aot_specs(quick: bool):
    """Specialisations kernels.tools.aot_check compiles (padded dims 32 and 64; fp32 only)."""
    out = []
    for mp in (64,) if quick else (32, 64):
        ptrs = {
            n: "*fp32"
            for n in ("QF", "KF", "V", "O", "DO", "DQ", "DK", "DV", "DEN", "S", "Z", "DS", "DZ", "DR", "DRR", "R", "RR")
        }
        base = {"C": CHUNK, "MP": mp, "DP": mp}
        for fn in (_la_chunk_kv, _la_chunk_grad):
            out.append((f"{fn.__name__} fp32 m{mp} d{mp}", fn, ptrs, base, WARPS, 2))
        for causal in (False, True):
            for fn in (_la_fwd_chunk, _la_bwd_dq_chunk, _la_bwd_dkdv_chunk):
                out.append(
                    (f"{fn.__name__} fp32 m{mp} d{mp} causal={causal}", fn, ptrs, {**base, "CAUSAL": causal}, WARPS, 2)
                )
    return out
