"""The block-sparse PyTorch path against the dense reference, forward and backward, and the work it
really does (counted multiply-adds) against the visited tiles."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernels import attention, attention_ref, block_mask
from kernels.cpu.attention import block_sparse_attention


def _rand(B, h, hkv, lq, lk, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, h, lq, d, generator=g, dtype=torch.float64)
    k = torch.randn(B, hkv, lk, d, generator=g, dtype=torch.float64)
    v = torch.randn(B, hkv, lk, d, generator=g, dtype=torch.float64)
    return [t.requires_grad_() for t in (q, k, v)]


def _band(lq, lk, w):
    i = torch.arange(lq)[:, None] + (lk - lq)
    j = torch.arange(lk)[None, :]
    return (i - j).abs() < w


MASKS = {
    "band": lambda lq, lk: _band(lq, lk, 5),
    "random": lambda lq, lk: torch.rand(lq, lk, generator=torch.Generator().manual_seed(3)) < 0.3,
    "empty_rows": lambda lq, lk: torch.cat([torch.zeros(9, lk, dtype=torch.bool), _band(lq, lk, 3)[9:]]),
    "global": lambda lq, lk: _band(lq, lk, 4) | (torch.arange(lq)[:, None] < 2) | (torch.arange(lk)[None] < 2),
}


def _mods(kind, h, lk, d):
    g = torch.Generator().manual_seed(7)
    if kind == "alibi":
        return {"alibi_slopes": torch.rand(h, generator=g, dtype=torch.float64)}
    if kind == "rel_bias":
        return {"rel_bias": torch.randn(h, 2 * lk - 1, generator=g, dtype=torch.float64).requires_grad_()}
    if kind == "softcap":
        return {"softcap": 2.0}
    if kind == "shaw":
        return {
            "rel_k": torch.randn(1, 9, d, generator=g, dtype=torch.float64).requires_grad_(),
            "rel_v": torch.randn(1, 9, d, generator=g, dtype=torch.float64).requires_grad_(),
        }
    if kind == "xl":
        return {"rel_k": torch.randn(h, 2 * lk - 1, d, generator=g, dtype=torch.float64).requires_grad_()}
    return {}


@pytest.mark.parametrize("mask_kind", list(MASKS))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (4, 1)])
@pytest.mark.parametrize("mod", ["none", "alibi", "rel_bias", "softcap", "shaw", "xl"])
@pytest.mark.parametrize("lens", [(37, 37), (21, 40)])
def test_block_sparse_matches_dense_reference(mask_kind, causal, heads, mod, lens):
    h, hkv = heads
    lq, lk = lens
    d = 8
    q, k, v = _rand(2, h, hkv, lq, lk, d)
    mods = _mods(mod, h, lk, d)
    mask = MASKS[mask_kind](lq, lk)
    bm = block_mask(mask, 8)
    out = block_sparse_attention(q, k, v, bm, causal=causal, scale=0.3, **mods)
    ref, p = attention_ref(q, k, v, causal=causal, mask=mask, scale=0.3, **mods)
    torch.testing.assert_close(out, ref)
    leaves = [q, k, v] + [t for t in mods.values() if isinstance(t, torch.Tensor) and t.requires_grad]
    go = torch.randn_like(out)
    g1 = torch.autograd.grad(out, leaves, go)
    g2 = torch.autograd.grad(ref, leaves, go)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b)
        assert torch.isfinite(a).all()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mod", ["none", "alibi", "rel_bias", "softcap", "shaw"])
def test_public_entry_dense_paths(causal, mod):
    """No block mask: SDPA or the all-visited layout, both equal to the reference."""
    q, k, v = _rand(1, 4, 2, 19, 30, 8, seed=1)
    mods = _mods(mod, 4, 30, 8)
    out = attention(q, k, v, causal=causal, **mods)
    ref, _ = attention_ref(q, k, v, causal=causal, **mods)
    torch.testing.assert_close(out, ref)


def test_reference_probabilities_are_exactly_zero_outside_the_mask():
    q, k, v = _rand(1, 2, 2, 16, 16, 4)
    mask = _band(16, 16, 3)
    _, p = attention_ref(q, k, v, causal=True, mask=mask)
    allowed = mask & (torch.arange(16)[None] <= torch.arange(16)[:, None])
    assert (p[..., ~allowed] == 0).all()
    torch.testing.assert_close(p.sum(-1), torch.ones(1, 2, 16, dtype=p.dtype))


class _MacCounter(TorchDispatchMode):
    """Multiply-adds of every matmul and fused attention call that really runs (forward or
    backward), counted from the shapes the ops receive: the work done, whatever the plan claims."""

    def __init__(self):
        super().__init__()
        self.macs = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in ("mm", "addmm", "bmm", "baddbmm"):
            a, b = args[-2], args[-1]
            self.macs += a.numel() * b.shape[-1]  # (.., m, k) @ (.., k, n): m k n per batch
        elif name == "_scaled_dot_product_flash_attention_for_cpu":
            q, k = args[0], args[1]
            self.macs += 2 * q.numel() * k.shape[-2]  # q k^T and p v: 2 Lq Lk d per (batch, head)
        elif name == "_scaled_dot_product_flash_attention_for_cpu_backward":
            q, k = args[1], args[2]
            self.macs += 4 * q.numel() * k.shape[-2]  # d(p v), dq, dk, dv of the recomputed scores
        elif "matmul" in name or "attention" in name:
            raise AssertionError(f"uncounted op {func}")  # a new kernel must be counted, not missed
        return func(*args, **kwargs)


def _macs(fn):
    with _MacCounter() as counter:
        fn()
    return counter.macs


PATTERNS = {
    "sliding": lambda L: _band(L, L, 48) & (torch.arange(L)[None] <= torch.arange(L)[:, None]),
    "band": lambda L: _band(L, L, 48),
    "global": lambda L: _band(L, L, 32) | (torch.arange(L)[:, None] < 4) | (torch.arange(L)[None] < 4),
    "strided": lambda L: (torch.arange(L)[:, None] - torch.arange(L)[None]) % 200 == 0,
}


@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_work_done_is_proportional_to_visited_blocks(pattern):
    """Counted multiply-adds of the CPU path, forward and backward: at most twice those of the
    visited tiles (the stacked prefix may read a common key range), and linear in L for windows,
    where dense attention would grow as L^2."""
    h, d, blk = 2, 16, 32
    done = {}
    for L in (512, 1024, 2048):
        q, k, v = _rand(1, h, h, L, L, d)
        mask = PATTERNS[pattern](L)
        bm = block_mask(mask, blk)
        # the layout visits exactly the tiles that hold an allowed pair
        assert bm.n_visited == int(mask.view(L // blk, blk, L // blk, blk).any(3).any(1).sum())
        out = []
        fwd = _macs(lambda: out.append(attention(q, k, v, block_mask=bm)))
        bwd = _macs(lambda: out[0].sum().backward())
        tiles = 2 * h * bm.n_visited * blk * blk * d  # q k^T and p v over the visited tiles
        assert 0 < fwd <= 2 * tiles, (L, fwd, tiles)
        assert 0 < bwd <= 2 * 2 * tiles, (L, bwd, tiles)
        done[L] = fwd + bwd
    if pattern in ("sliding", "band"):  # O(L) allowed pairs: the work, layout included, is linear
        assert done[2048] <= 2.2 * done[1024] <= 2.2**2 * done[512]


@pytest.mark.parametrize("lens", [(40, 40), (24, 40)])
@pytest.mark.parametrize("mod", ["none", "rel_bias", "softcap", "shaw"])
def test_a_mask_with_no_allowed_key_gives_zeros_on_the_graph(lens, mod):
    """Nothing allowed anywhere: the output is zeros that stay on the autograd graph, so
    ``backward()`` works and every gradient is zero, as the reference gives them."""
    lq, lk = lens
    q, k, v = _rand(2, 4, 2, lq, lk, 8)
    mods = _mods(mod, 4, lk, 8)
    mask = torch.zeros(lq, lk, dtype=torch.bool)
    out = attention(q, k, v, block_mask=block_mask(mask, 8), **mods)
    ref, _ = attention_ref(q, k, v, mask=mask, **mods)
    assert out.requires_grad and (out == 0).all()
    torch.testing.assert_close(out, ref)
    leaves = [q, k, v] + [t for t in mods.values() if isinstance(t, torch.Tensor) and t.requires_grad]
    out.sum().backward()
    for t in leaves:
        assert t.grad is not None and (t.grad == 0).all()
    with torch.no_grad():  # no graph asked for: plain zeros
        assert not attention(q, k, v, block_mask=block_mask(mask, 8)).requires_grad
