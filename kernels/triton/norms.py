"""Triton kernels of kernels/norms.py (LayerNorm / RMSNorm; algorithm in that module's docstring).

Imported lazily by kernels/norms.py on the Triton path only, so ``import kernels`` and ``import
models`` need no triton (CPU-only machines, macOS, Windows).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _norm_fwd(X, W, B, Y, MEAN, RSTD, n_rows, N, eps, RMS: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    ok = cols < N
    x = tl.load(X + row.to(tl.int64) * N + cols, mask=ok, other=0.0).to(tl.float32)
    if RMS:
        mean = 0.0
        xc = x
    else:
        mean = tl.sum(x, 0) / N
        xc = tl.where(ok, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, 0) / N + eps)
    w = tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
    y = xc * rstd * w
    if not RMS:
        y += tl.load(B + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(Y + row.to(tl.int64) * N + cols, y.to(Y.dtype.element_ty), mask=ok)
    tl.store(MEAN + row, mean)
    tl.store(RSTD + row, rstd)


@triton.jit
def _norm_bwd(X, W, DY, DX, MEAN, RSTD, DW_PART, DB_PART, n_rows, N, RMS: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    ok = cols < N
    w = tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_N], tl.float32)
    db = tl.zeros([BLOCK_N], tl.float32)
    for row in range(pid, n_rows, n_prog):
        off = tl.cast(row, tl.int64) * N + cols  # int64 before the product: rows * N may pass 2**31
        x = tl.load(X + off, mask=ok, other=0.0).to(tl.float32)
        dy = tl.load(DY + off, mask=ok, other=0.0).to(tl.float32)
        rstd = tl.load(RSTD + row)
        xhat = tl.where(ok, (x - tl.load(MEAN + row)) * rstd, 0.0)
        g = dy * w
        dx = g - xhat * (tl.sum(g * xhat, 0) / N)
        if not RMS:
            dx -= tl.sum(g, 0) / N
        tl.store(DX + off, (dx * rstd).to(DX.dtype.element_ty), mask=ok)
        dw += dy * xhat
        db += dy
    tl.store(DW_PART + pid * N + cols, dw, mask=ok)
    tl.store(DB_PART + pid * N + cols, db, mask=ok)


MAX_BWD_PROGRAMS = 128


class _Norm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps, rms):
        N = x.shape[-1]
        x2 = x.reshape(-1, N).contiguous()  # (rows, N)
        M = x2.shape[0]
        y = torch.empty_like(x2)
        mean = torch.empty(M, dtype=torch.float32, device=x.device)
        rstd = torch.empty(M, dtype=torch.float32, device=x.device)
        w = weight.contiguous()
        b = w if bias is None else bias.contiguous()
        _norm_fwd[(M,)](x2, w, b, y, mean, rstd, M, N, eps, RMS=rms, BLOCK_N=triton.next_power_of_2(N))
        ctx.save_for_backward(x2, w, mean, rstd)
        ctx.rms, ctx.has_bias = rms, bias is not None
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x2, w, mean, rstd = ctx.saved_tensors
        M, N = x2.shape
        dy2 = dy.reshape(M, N).contiguous()
        dx = torch.empty_like(x2)
        n_prog = max(1, min(M, MAX_BWD_PROGRAMS))
        dw_part = torch.empty(n_prog, N, dtype=torch.float32, device=x2.device)
        db_part = torch.empty(n_prog, N, dtype=torch.float32, device=x2.device)
        _norm_bwd[(n_prog,)](
            x2, w, dy2, dx, mean, rstd, dw_part, db_part, M, N, RMS=ctx.rms, BLOCK_N=triton.next_power_of_2(N)
        )
        dw = dw_part.sum(0).to(w.dtype)
        db = db_part.sum(0).to(w.dtype) if ctx.has_bias else None
        return dx.view(dy.shape), dw, db, None, None


def aot_specs(quick: bool):
    """Specialisations kernels.tools.aot_check compiles (widths up to 4096 = d_model of the presets)."""
    out = []
    for tt in ("fp16",) if quick else ("fp16", "bf16", "fp32"):
        for width in (512,) if quick else (128, 1024, 4096):
            io = {
                "X": "*" + tt,
                "W": "*" + tt,
                "B": "*" + tt,
                "Y": "*" + tt,
                "DY": "*" + tt,
                "DX": "*" + tt,
                "MEAN": "*fp32",
                "RSTD": "*fp32",
                "DW_PART": "*fp32",
                "DB_PART": "*fp32",
            }
            for rms in (False, True):
                tag = "rms" if rms else "layer"
                out.append((f"{tag}_norm fwd {tt} {width}", _norm_fwd, io, {"RMS": rms, "BLOCK_N": width}, 4, 2))
                out.append((f"{tag}_norm bwd {tt} {width}", _norm_bwd, io, {"RMS": rms, "BLOCK_N": width}, 4, 2))
    return out
