"""kernels.cpu.pooled_implicit: the pooled map of a signed causal matrix from indicator values and bands
equals dense pooling (``pool_probs``) of that matrix, cell by cell and statistic by statistic."""

from __future__ import annotations

import math

import pytest
import torch

from kernels.cpu.pooled_implicit import pooled_implicit
from kernels.pooled_dense import pool_probs


def semiseparable(B, h, L, n, seed=0):
    """A signed causal matrix with the structure of a state-space layer: (C_i . B_j) times decays."""
    g = torch.Generator().manual_seed(seed)
    c = torch.randn(B, h, L, n, generator=g, dtype=torch.float64)
    b = torch.randn(B, h, L, n, generator=g, dtype=torch.float64)
    log_decay = -torch.rand(B, h, L, generator=g, dtype=torch.float64) * 0.2
    cum = log_decay.cumsum(-1)
    seg = cum[..., :, None] - cum[..., None, :]  # sum_{r = j+1..i} of the log decays
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    return (c @ b.transpose(-1, -2)) * torch.exp(seg.masked_fill(~causal, -math.inf))  # (B, h, L, L)


@pytest.mark.parametrize("L, block, window, sink_k", [(96, 16, 8, 4), (100, 32, 24, 0), (37, 8, 64, 40)])
def test_equals_dense_pooling(L, block, window, sink_k):
    a = semiseparable(2, 3, L, 4)
    assert (a < 0).any()  # signed weights: the case this module exists for
    apply_calls = []

    def apply(values):
        apply_calls.append(values.shape)
        return (a @ values.double()).float()

    def band(lo, hi):
        return a[..., lo:hi, lo:hi]

    got = pooled_implicit(
        apply, band, batch=2, heads=3, length=L, block_q=block, sink_k=sink_k, window=window, device="cpu"
    )
    want = pool_probs(a, block, sink_k=sink_k, window=window)
    assert apply_calls == [(2, 3, L, -(-L // block) + 3)]  # one kernel call, O(L x cells) values
    scale = a.abs().sum(-1).max().item()
    for name in ("mass", "sink", "local", "distance"):
        w = getattr(want, name).float()
        tol = 1e-5 * scale * (L if name == "distance" else 1)
        assert torch.allclose(getattr(got, name), w, atol=tol, rtol=1e-4), name
    assert torch.isnan(got.entropy).all() and "not probabilities" in got.note
    assert (got.block_q, got.block_k, got.q_len, got.k_len) == (block, block, L, L)


def test_bands_never_span_more_than_two_windows():
    L, window = 200, 16
    a = semiseparable(1, 1, L, 2, seed=1)
    spans = []

    def band(lo, hi):
        spans.append(hi - lo)
        return a[..., lo:hi, lo:hi]

    pooled_implicit(lambda v: (a @ v.double()).float(), band, batch=1, heads=1, length=L, block_q=64, window=window)
    assert max(spans) <= 2 * window and len(spans) == -(-L // window)


def test_rejects_bad_arguments():
    with pytest.raises(ValueError):
        pooled_implicit(None, None, batch=1, heads=1, length=8, block_q=4, window=0)
    with pytest.raises(ValueError):
        pooled_implicit(None, None, batch=1, heads=1, length=0, block_q=4)
