"""The block-sparse PyTorch path against the dense reference, forward and backward."""
import pytest
import torch

from kernels import attention, attention_ref, block_mask
from kernels.cpu_attention import block_sparse_attention


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
    "empty_rows": lambda lq, lk: torch.cat([torch.zeros(9, lk, dtype=torch.bool),
                                            _band(lq, lk, 3)[9:]]),
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
        return {"rel_k": torch.randn(1, 9, d, generator=g, dtype=torch.float64).requires_grad_(),
                "rel_v": torch.randn(1, 9, d, generator=g, dtype=torch.float64).requires_grad_()}
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


def test_work_is_proportional_to_visited_blocks():
    """The band's layout visits O(L) blocks; the gathered strip never spans the whole sequence."""
    for L in (256, 512, 1024):
        bm = block_mask(_band(L, L, 32), 32)
        assert bm.n_visited <= 3 * (L // 32)
        assert bm.kv_indices.shape[1] <= 3
