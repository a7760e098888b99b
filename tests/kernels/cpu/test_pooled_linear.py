"""Analytic pooled maps of feature-map attention against the dense kernel matrix pooled the same way."""

import pytest
import torch

from kernels import pool_probs, pooled_linear

STATS = ("mass", "entropy", "distance", "sink", "local")


def _dense_probs(pq, pk, causal):
    h = pq.shape[1]
    a = pq @ pk.repeat_interleave(h // pk.shape[1], 1).transpose(-1, -2)  # (B, h, Lq, Lk)
    if causal:
        lq, lk = a.shape[-2:]
        a = a.masked_fill(torch.arange(lk)[None, :] > torch.arange(lq)[:, None] + (lk - lq), 0.0)
    return a / a.sum(-1, keepdim=True)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    "h,hkv,lq,lk,block", [(4, 4, 150, 150, 32), (4, 2, 100, 170, 64), (2, 1, 64, 64, 16), (2, 2, 90, 90, 128)]
)
def test_against_dense(causal, h, hkv, lq, lk, block):
    g = torch.Generator().manual_seed(lq)
    pq = torch.rand(2, h, lq, 8, generator=g, dtype=torch.float64) + 0.05
    pk = torch.rand(2, hkv, lk, 8, generator=g, dtype=torch.float64) + 0.05
    out = pooled_linear(pq, pk, causal=causal, block_q=block, block_k=block, sink_k=5, window=7)
    ref = pool_probs(_dense_probs(pq, pk, causal), block, block, sink_k=5, window=7)
    for name in STATS:
        torch.testing.assert_close(getattr(out, name), getattr(ref, name), atol=1e-10, rtol=1e-10, msg=name)
    torch.testing.assert_close(out.mass.sum(-1), torch.ones_like(out.mass.sum(-1)))


def test_entropy_left_out_past_its_length_and_said_so():
    pq = torch.rand(1, 1, 300, 4, dtype=torch.float64)
    out = pooled_linear(pq, pq, causal=True, block_q=64, entropy_max_len=256)
    assert torch.isnan(out.entropy).all() and "entropy" in out.note and "300" in out.note
    assert torch.isfinite(out.mass).all() and torch.isfinite(out.distance).all()


def test_shapes_checked():
    with pytest.raises(ValueError, match="do not match"):
        pooled_linear(torch.rand(1, 3, 8, 4), torch.rand(1, 2, 8, 4), causal=True, block_q=64)


def test_linear_in_the_length_past_the_entropy_limit():
    """Past the entropy's limit nothing of L x L size is made: the largest tensor is O(L x features)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        largest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    Largest.largest = max(Largest.largest, t.numel())
            return out

    L = 8192
    pq = torch.rand(1, 2, L, 16, dtype=torch.float64)
    with Largest():
        out = pooled_linear(pq, pq, causal=True, block_q=64, entropy_max_len=4096)
    assert out.mass.shape == (1, 2, 128, 128)
    assert Largest.largest <= 2 * (L + 1) * 16 * 2, Largest.largest
