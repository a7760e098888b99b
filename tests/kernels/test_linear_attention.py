"""Triton chunked linear attention (interpreted) against a dense formula and the torch path."""

import pytest
import torch

from kernels.cpu.linear_attention import linear_attention_ref
from kernels.linear_attention import linear_attention


def _dense(q, k, v, causal, eps=1e-6):
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    a = q @ k.transpose(-1, -2)  # (B, h, L, L): fine for a tiny test reference
    if causal:
        a = a.tril()
    return (a @ v) / (a.sum(-1, keepdim=True) + eps)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("h,h_kv,L,m,d", [(2, 2, 45, 16, 32), (4, 2, 70, 24, 16), (2, 1, 33, 32, 32)])
def test_linear_attention_triton(causal, h, h_kv, L, m, d):
    g = torch.Generator().manual_seed(L)
    q = torch.rand(1, h, L, m, generator=g).requires_grad_()
    k = torch.rand(1, h_kv, L, m, generator=g).requires_grad_()
    v = torch.randn(1, h_kv, L, d, generator=g).requires_grad_()
    out = linear_attention(q, k, v, causal=causal, force_triton=True)
    ref = _dense(q, k, v, causal)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    do = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, [q, k, v], do), torch.autograd.grad(ref, [q, k, v], do)):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_linear_attention_triton_half_inputs():
    """fp16 inputs run the fp32 kernels (converted once) and come back as fp16."""
    g = torch.Generator().manual_seed(1)
    q = torch.rand(1, 2, 40, 16, generator=g).half().requires_grad_()
    k = torch.rand(1, 1, 40, 16, generator=g).half().requires_grad_()
    v = torch.randn(1, 1, 40, 16, generator=g).half().requires_grad_()
    out = linear_attention(q, k, v, causal=True, force_triton=True)
    assert out.dtype == torch.float16
    ref = _dense(q.float(), k.float(), v.float(), True)
    torch.testing.assert_close(out.float(), ref, atol=2e-3, rtol=2e-3)
    (dq,) = torch.autograd.grad(out.float().sum(), [q])
    assert dq.dtype == torch.float16 and torch.isfinite(dq).all()


@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_torch_path(causal):
    q, k, v = torch.rand(1, 2, 150, 8), torch.rand(1, 1, 150, 8), torch.randn(1, 1, 150, 16)
    torch.testing.assert_close(linear_attention(q, k, v, causal=causal), _dense(q, k, v, causal), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        linear_attention_ref(q, k, v, causal=causal, chunk=32), _dense(q, k, v, causal), atol=1e-5, rtol=1e-5
    )


@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_triton_batch_and_many_chunks(causal):
    """Batch 2, GQA, a length of several scan chunks plus a tail: every chunk's state is the
    prefix (causal) or total (non-causal) of its own batch row and K/V head."""
    g = torch.Generator().manual_seed(7)
    q = torch.rand(2, 4, 77, 24, generator=g).requires_grad_()
    k = torch.rand(2, 2, 77, 24, generator=g).requires_grad_()
    v = torch.randn(2, 2, 77, 40, generator=g).requires_grad_()
    out = linear_attention(q, k, v, causal=causal, force_triton=True)
    ref = _dense(q, k, v, causal)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    do = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, [q, k, v], do), torch.autograd.grad(ref, [q, k, v], do)):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
