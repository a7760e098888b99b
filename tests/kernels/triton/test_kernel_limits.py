"""Launch limits and argument checks of the Triton kernels (interpreted on CPU tensors).

Grid y (= B * h) is capped at 65535 on CUDA: the launchers split the batch; here the limit is
lowered (``kernels.triton.grid_limits.MAX_GRID_Y``) so the split runs on small tensors and is compared
with the reference. Modifier tensors of the wrong shape are refused before any raw-pointer read.
"""

import pytest
import torch

import kernels.triton.grid_limits as grid_limits
from kernels.cpu.linear_attention import linear_attention_dense
from kernels.linear_attention import linear_attention
from kernels.reference import attention_ref
from kernels.triton.flash.launcher import flash_attention
from kernels.triton.grid_limits import batch_slices


@pytest.mark.parametrize("batch,per_item,limit", [(1, 8, 65535), (10, 3, 7), (9, 3, 9), (5, 5, 5), (7, 1, 3)])
def test_batch_slices_cover_the_batch_within_the_limit(batch, per_item, limit):
    parts = batch_slices(batch, per_item, limit=limit)
    covered = [i for s in parts for i in range(batch)[s]]
    assert covered == list(range(batch))  # consecutive, complete, no overlap
    assert all((s.stop - s.start) * per_item <= limit for s in parts)
    assert len(parts) == -(-batch // (limit // per_item))  # as few launches as the limit allows


def test_batch_slices_refuse_too_many_heads():
    with pytest.raises(ValueError, match="query heads = 70000 exceeds the CUDA grid limit of 65535"):
        batch_slices(1, 70000, "query heads")


def _inputs(B, h, h_kv, L, d, seed):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g).requires_grad_()  # noqa: E731
    return mk(B, h, L, d), mk(B, h_kv, L, d), mk(B, h_kv, L, d)


def test_flash_attention_splits_a_batch_over_the_grid_limit(monkeypatch):
    """B * h = 12 > a limit of 4: three launches of one batch element each; outputs and all
    gradients (rel_bias's summed over the launches) equal the reference's."""
    monkeypatch.setattr(grid_limits, "MAX_GRID_Y", 4)
    B, h, L = 3, 4, 40
    q, k, v = _inputs(B, h, 2, L, 32, seed=0)
    slopes = torch.tensor([0.1, 0.2, 0.3, 0.4])
    relb = torch.randn(h, 2 * L - 1).requires_grad_()
    out = flash_attention(q, k, v, causal=True, alibi_slopes=slopes, rel_bias=relb)
    ref, _ = attention_ref(q, k, v, causal=True, alibi_slopes=slopes, rel_bias=relb)
    torch.testing.assert_close(out, ref, atol=2e-4, rtol=2e-4)
    do = torch.randn_like(out)
    got = torch.autograd.grad(out, [q, k, v, relb], do)
    want = torch.autograd.grad(ref, [q, k, v, relb], do)
    for name, a, b in zip(("dq", "dk", "dv", "drel_bias"), got, want):
        torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-3, msg=name)


def test_flash_attention_refuses_more_heads_than_the_grid(monkeypatch):
    monkeypatch.setattr(grid_limits, "MAX_GRID_Y", 2)
    q, k, v = _inputs(1, 4, 4, 16, 32, seed=1)
    with pytest.raises(ValueError, match="query heads = 4 exceeds"):
        flash_attention(q, k, v)


def test_linear_attention_splits_a_batch_over_the_grid_limit(monkeypatch):
    monkeypatch.setattr(grid_limits, "MAX_GRID_Y", 4)
    g = torch.Generator().manual_seed(2)
    q = torch.rand(3, 2, 20, 16, generator=g).requires_grad_()
    k = torch.rand(3, 1, 20, 16, generator=g).requires_grad_()
    v = torch.randn(3, 1, 20, 16, generator=g).requires_grad_()
    out = linear_attention(q, k, v, causal=True, force_triton=True)
    ref = linear_attention_dense(q, k, v, causal=True)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    do = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, [q, k, v], do), torch.autograd.grad(ref, [q, k, v], do)):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(alibi_slopes=torch.ones(3)), r"alibi_slopes must have shape \[h\] = \[4\].*got \[3\]"),
        (dict(alibi_slopes=torch.ones(1, 4)), r"alibi_slopes must have shape \[h\] = \[4\].*got \[1, 4\]"),
        (dict(alibi_slopes=torch.ones(4, dtype=torch.int64)), "alibi_slopes must be a floating-point"),
        (dict(rel_bias=torch.zeros(4, 20)), r"rel_bias must have shape \[h, 2 Lk - 1\] = \[4, 39\].*got \[4, 20\]"),
        (dict(rel_bias=torch.zeros(2, 39)), r"rel_bias must have shape .*got \[2, 39\]"),
        (dict(rel_bias=[0.0] * 39), "rel_bias must be a tensor"),
    ],
)
def test_modifier_shapes_are_checked_before_the_kernel_reads_them(kw, match):
    q, k, v = _inputs(1, 4, 2, 20, 32, seed=3)
    with pytest.raises(ValueError, match=match):
        flash_attention(q, k, v, **kw)
