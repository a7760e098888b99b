"""Triton LayerNorm / RMSNorm (interpreted) against PyTorch references."""

import pytest
import torch
import torch.nn.functional as F

from kernels.cpu.norms import layer_norm_ref, rms_norm_ref
from kernels.norms import layer_norm, rms_norm


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 5e-3)])
@pytest.mark.parametrize("n", [64, 48])
def test_layer_norm(dtype, tol, n):
    x = torch.randn(3, 5, n).to(dtype).requires_grad_()
    w = torch.randn(n).to(dtype).requires_grad_()
    b = torch.randn(n).to(dtype).requires_grad_()
    y = layer_norm(x, w, b, force_triton=True)
    yr = F.layer_norm(x.float(), (n,), w.float(), b.float(), 1e-5)
    torch.testing.assert_close(y.float(), yr, atol=tol, rtol=tol)
    g = torch.randn_like(yr)
    got = torch.autograd.grad(y, [x, w, b], g.to(dtype))
    want = torch.autograd.grad(yr, [x, w, b], g)
    for a, c in zip(got, want):
        torch.testing.assert_close(a.float(), c.float(), atol=tol * 10, rtol=tol * 10)


@pytest.mark.parametrize("n", [64, 40])
def test_rms_norm(n):
    x = torch.randn(4, 3, n, requires_grad=True)
    w = torch.randn(n, requires_grad=True)
    y = rms_norm(x, w, force_triton=True)
    yr = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w
    torch.testing.assert_close(y, yr, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(y)
    for a, c in zip(torch.autograd.grad(y, [x, w], g), torch.autograd.grad(yr, [x, w], g)):
        torch.testing.assert_close(a, c, atol=1e-4, rtol=1e-4)


def test_cpu_dispatch_uses_refs():
    x, w, b = torch.randn(2, 8), torch.randn(8), torch.randn(8)
    assert torch.equal(layer_norm(x, w, b), layer_norm_ref(x, w, b))
    assert torch.equal(rms_norm(x, w), rms_norm_ref(x, w))
