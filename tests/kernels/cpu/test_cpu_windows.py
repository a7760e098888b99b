"""Sliding-window layouts on the CPU: the runs computed as fused attention over overlapping key
windows agree with the dense reference, forward and backward, in fp32 and fp64."""

import pytest
import torch

from kernels import attention_ref, block_mask
from kernels.cpu.attention import block_sparse_attention
from kernels.cpu.plan import SLIDING, STACKED
from kernels.cpu.plan import plan as _plan


def _window(lq, lk, w, causal_shape=True):
    """Keys ``i - w < j <= i`` (or ``|i - j| < w``), queries the last ``lq`` of ``lk`` positions."""
    i = torch.arange(lq)[:, None] + (lk - lq)
    j = torch.arange(lk)[None, :]
    return ((i - j >= 0) & (i - j < w)) if causal_shape else (i - j).abs() < w


def _inputs(h, hkv, lq, lk, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(2, n, L, d, generator=g, dtype=dtype).requires_grad_() for n, L in ((h, lq), (hkv, lk), (hkv, lk))
    ]


def _mods(kind, h, lk, dtype):
    g = torch.Generator().manual_seed(5)
    if kind == "alibi":
        return {"alibi_slopes": torch.rand(h, generator=g, dtype=dtype)}
    if kind == "rel_bias":
        return {"rel_bias": torch.randn(h, 2 * lk - 1, generator=g, dtype=dtype).requires_grad_()}
    return {}


def _fused_rows(bm, lq, lk):
    groups, _ = _plan(bm, lq, lk, torch.device("cpu"))
    return sum(grp.rows.numel() for grp in groups if grp.kind in (SLIDING, STACKED))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (4, 1)])
@pytest.mark.parametrize("mod", ["none", "alibi", "rel_bias"])
@pytest.mark.parametrize("shape", [(203, 203, True), (150, 230, True), (300, 300, False)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("blk", [16, 32])
def test_fused_windows_match_reference(dtype, heads, mod, shape, causal, blk):
    lq, lk, causal_shape = shape
    lq, lk = lq * blk // 16, lk * blk // 16
    h, hkv = heads
    q, k, v = _inputs(h, hkv, lq, lk, 16, dtype)
    mods = _mods(mod, h, lk, dtype)
    mask = _window(lq, lk, 40 * blk // 16, causal_shape)
    bm = block_mask(mask, blk)
    if blk == 32 and causal_shape:  # a causal window: both halves of a block share one window
        groups, _ = _plan(bm, lq, lk, torch.device("cpu"))
        assert any(grp.half is not None and grp.rows.numel() > 4 for grp in groups)
    # most query blocks are computed by the fused path (all but a few at the ends)
    assert _fused_rows(bm, lq, lk) >= bm.n_q_blocks - 8
    out = block_sparse_attention(q, k, v, bm, causal=causal, scale=0.25, **mods)
    ref, _ = attention_ref(q, k, v, mask=mask, causal=causal, scale=0.25, **mods)
    tol = {"atol": 2e-5, "rtol": 2e-5} if dtype == torch.float32 else {}
    torch.testing.assert_close(out, ref, **tol)
    leaves = [q, k, v] + [t for t in mods.values() if t.requires_grad]
    go = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, leaves, go), torch.autograd.grad(ref, leaves, go)):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, **({"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {}))


def test_runs_split_where_the_tile_mask_changes():
    """A window whose first rows are cut by the sequence start, and a ragged last block: those rows
    get runs of their own, the bulk is one run with the shared mask of a full window."""
    L, w, blk = 200, 48, 16
    bm = block_mask(_window(L, L, w), blk)
    groups, _ = _plan(bm, L, L, torch.device("cpu"))
    windows = [grp for grp in groups if grp.kind == SLIDING]
    bulk = max(windows, key=lambda grp: grp.rows.numel())
    assert bulk.rows.numel() >= L // blk - 5
    assert bulk.window.shape[0] == 1  # one window shared by the whole run
    K = bulk.window.shape[2]
    i = torch.arange(blk)[:, None]
    j = torch.arange(K)[None, :] - (K - blk)  # key offsets relative to the row's query block
    assert torch.equal(bulk.window[0], (i - j >= 0) & (i - j < w))
    prefix = [grp for grp in groups if grp.kind == STACKED]  # the rows before the bulk, cut by the start
    assert len(prefix) == 1 and torch.equal(prefix[0].rows, torch.arange(bulk.row_start))
    P, bq, Kp = prefix[0].window.shape  # every prefix row reads key blocks idx[0], from key 0 here
    assert int(prefix[0].idx[0, 0]) == 0 and (P, bq) == (bulk.row_start, blk)
    assert torch.equal(prefix[0].window.reshape(P * bq, Kp), _window(L, L, w)[: P * bq, :Kp])
    assert not _window(L, L, w)[: P * bq, Kp:].any()  # nothing allowed outside the stacked key range
    rows = torch.cat([grp.rows for grp in groups]).sort().values
    assert torch.equal(rows, torch.arange(bm.n_q_blocks))  # every query block in exactly one group


def test_a_row_emptied_by_causality_falls_back_and_outputs_zero():
    """Keys strictly in the future of every query of a run: the fused path declines, the general path
    gives those rows zero output and finite gradients, as the reference does."""
    L = 96
    i = torch.arange(L)[:, None]
    j = torch.arange(L)[None, :]
    mask = (j - i > 0) & (j - i <= 20)  # only future keys: causal empties every row
    q, k, v = _inputs(2, 2, L, L, 8, torch.float64)
    bm = block_mask(mask, 16)
    out = block_sparse_attention(q, k, v, bm, causal=True)
    ref, _ = attention_ref(q, k, v, mask=mask, causal=True)
    torch.testing.assert_close(out, ref)
    assert (out == 0).all()
    grads = torch.autograd.grad(out.sum(), [q, k, v])
    assert all(torch.isfinite(g).all() for g in grads)
