"""Triton RoPE (interpreted) against the plain PyTorch rotate-half reference and a formula."""

import math

import pytest
import torch

from kernels.cpu.rope import apply_rope_ref
from kernels.rope import apply_rope


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2e-3)])
@pytest.mark.parametrize("d", [32, 24])
def test_rope_matches_reference(dtype, tol, d):
    x = torch.randn(2, 3, 37, d).to(dtype).requires_grad_()
    pos = torch.arange(37) + 5
    y = apply_rope(x, pos, force_triton=True)
    yr = apply_rope_ref(x, pos)
    torch.testing.assert_close(y.float(), yr.float(), atol=tol, rtol=tol)
    g = torch.randn_like(y)
    torch.testing.assert_close(
        torch.autograd.grad(y, x, g)[0].float(), torch.autograd.grad(yr, x, g)[0].float(), atol=tol, rtol=tol
    )


def test_rope_formula_and_norm():
    d = 8
    x = torch.randn(1, 4, d)
    pos = torch.tensor([0, 1, 2, 7])
    y = apply_rope(x, pos, base=100.0, force_triton=True)
    torch.testing.assert_close(y[0, 0], x[0, 0])  # position 0 is the identity
    k = 1
    ang = 7 * 100.0 ** (-2 * k / d)
    want = x[0, 3, k] * math.cos(ang) - x[0, 3, k + d // 2] * math.sin(ang)
    assert abs(y[0, 3, k].item() - want) < 1e-5
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))  # a rotation


def test_rope_cpu_dispatch_uses_torch():
    x = torch.randn(1, 5, 16)
    assert torch.equal(apply_rope(x, torch.arange(5)), apply_rope_ref(x, torch.arange(5)))


def test_triton_rope_fp32_at_long_positions_is_as_accurate_as_torch():
    """Positions near 8k: the angle pos * theta magnifies any error of theta. The kernel reads the
    correctly rounded fp32 theta and forms the same fp32 angle as the torch reference, so against a
    float64 rotation its error matches the reference's (with theta computed in the kernel as
    2^(-(k / half) log2 base) it was 1.9x: 1.6e-3 against 8.1e-4 here)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 64, 64, generator=g)
    pos = torch.arange(8192 - 64, 8192)
    exact = apply_rope_ref(x.double(), pos)
    err_ours = (apply_rope(x, pos, force_triton=True).double() - exact).abs().max()
    err_torch = (apply_rope_ref(x, pos).double() - exact).abs().max()
    assert err_ours <= 1.25 * err_torch, (float(err_ours), float(err_torch))
