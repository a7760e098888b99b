"""Triton kernel of kernels/rope.py (rotate-half RoPE; convention in that module's docstring).

Imported lazily by kernels/rope.py on the Triton path only, so ``import kernels`` and ``import
models`` need no triton.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl


@triton.jit
def _rope_kernel(X, Y, POS, INV, n_rows, L, sign, HALF: tl.constexpr, HALF_PAD: tl.constexpr, BLOCK_R: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    k = tl.arange(0, HALF_PAD)
    ok = (rows[:, None] < n_rows) & (k[None, :] < HALF)
    pos = tl.load(POS + rows % L, mask=rows < n_rows, other=0).to(tl.float32)
    # theta_k = base^(-2k/d), from the launcher's table: computed in the kernel as
    # 2^(-(k / HALF) log2(base)) its relative error was ~13 ln2 times that of the rounded exponent
    # (~8 ulp), which the angle pos * theta carries to every position.
    theta = tl.load(INV + k, mask=k < HALF, other=0.0)
    ang = pos[:, None] * theta[None, :]
    c = tl.cos(ang)
    s = tl.sin(ang) * sign
    base = rows[:, None].to(tl.int64) * (2 * HALF) + k[None, :]
    x1 = tl.load(X + base, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(X + base + HALF, mask=ok, other=0.0).to(tl.float32)
    tl.store(Y + base, (x1 * c - x2 * s).to(Y.dtype.element_ty), mask=ok)
    tl.store(Y + base + HALF, (x2 * c + x1 * s).to(Y.dtype.element_ty), mask=ok)


BLOCK_R = 16


@functools.lru_cache(maxsize=32)
def _inv_freq(half: int, base: float, device: str) -> torch.Tensor:
    """``theta_k = base^(-k / half)`` in float64 on the device, rounded once to float32 (made on the
    device: no host-to-device copy in the launch path; cached per size, base and device)."""
    k = torch.arange(half, dtype=torch.float64, device=device)
    return (float(base) ** (-k / half)).float()


def _launch(x: torch.Tensor, positions: torch.Tensor, base: float, sign: float) -> torch.Tensor:
    L, d = x.shape[-2], x.shape[-1]
    xc = x.contiguous()
    y = torch.empty_like(xc)
    n_rows = xc.numel() // d
    pos = positions.to(device=x.device, dtype=torch.int32).contiguous()
    half = d // 2
    _rope_kernel[(triton.cdiv(n_rows, BLOCK_R),)](
        xc,
        y,
        pos,
        _inv_freq(half, float(base), str(x.device)),
        n_rows,
        L,
        sign,
        HALF=half,
        HALF_PAD=triton.next_power_of_2(half),
        BLOCK_R=BLOCK_R,
    )
    return y


class _Rope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, positions, base):
        ctx.save_for_backward(positions)
        ctx.base = base
        return _launch(x, positions, base, 1.0)

    @staticmethod
    def backward(ctx, dy):
        (positions,) = ctx.saved_tensors
        return _launch(dy, positions, ctx.base, -1.0), None, None


def aot_specs(quick: bool):
    """Specialisations kernels.tools.aot_check compiles: (name, fn, pointer types, constexprs, warps, stages)."""
    out = []
    for tt in ("fp16",) if quick else ("fp16", "bf16", "fp32"):
        for d in (64,) if quick else (32, 64, 128):
            ptrs = {"X": "*" + tt, "Y": "*" + tt, "POS": "*i32", "INV": "*fp32"}
            out.append(
                (f"rope {tt} d{d}", _rope_kernel, ptrs, {"HALF": d // 2, "HALF_PAD": d // 2, "BLOCK_R": BLOCK_R}, 4, 2)
            )
    return out
