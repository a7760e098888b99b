"""Pooled attention maps on the CPU path against the dense reference pooled the same way
(``kernels.pooled_dense.pool_probs`` of ``attention_ref``'s probabilities), in float64."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from kernels import attention_ref, block_mask, pooled_attention
from kernels.pooled_dense import pool_probs, pooled_block
from kernels.reference import relative_positions

STATS = ("mass", "entropy", "distance", "sink", "local")


def _qk(B, h, hkv, lq, lk, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, h, lq, d, generator=g, dtype=torch.float64) * 1.5,
        torch.randn(B, hkv, lk, d, generator=g, dtype=torch.float64) * 1.5,
    )


def _band(lq, lk, w):
    i = torch.arange(lq)[:, None] + (lk - lq)
    return (i - torch.arange(lk)[None, :]).abs() < w


MASKS = {
    "band": lambda lq, lk: _band(lq, lk, 9),
    "global_sinks": lambda lq, lk: _band(lq, lk, 5) | (torch.arange(lk)[None, :] < 3) | (torch.arange(lq)[:, None] < 2),
    "random": lambda lq, lk: torch.rand(lq, lk, generator=torch.Generator().manual_seed(3)) < 0.3,
    "empty_rows": lambda lq, lk: torch.cat([torch.zeros(9, lk, dtype=torch.bool), _band(lq, lk, 3)[9:]]),
}


def _mods(kind, h, lk, d=8):
    g = torch.Generator().manual_seed(7)
    return {
        "none": {},
        "alibi": {"alibi_slopes": torch.rand(h, generator=g, dtype=torch.float64)},
        "t5": {"rel_bias": torch.randn(h, 2 * lk - 1, generator=g, dtype=torch.float64)},
        "softcap": {"softcap": 2.5},
        "shaw": {"rel_k": 0.3 * torch.randn(h, 7, d, generator=g, dtype=torch.float64)},
    }[kind]


def _compare(q, k, *, sink_k=4, window=7, block=None, **kw):
    out = pooled_attention(q, k, sink_k=sink_k, window=window, block=block, **kw)
    v = torch.zeros_like(k)
    bm = kw.pop("block_mask", None)
    _, p = attention_ref(q, k, v, block_mask=bm, **kw)
    ref = pool_probs(p, out.block_q, out.block_k, sink_k=sink_k, window=window)
    assert out.mass.shape == ref.mass.shape
    for name in STATS:
        torch.testing.assert_close(getattr(out, name), getattr(ref, name), atol=1e-10, rtol=1e-10, msg=name)
    return out


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mods", ["none", "alibi", "t5", "softcap", "shaw"])
@pytest.mark.parametrize("h,hkv,lq,lk", [(4, 4, 150, 150), (4, 2, 100, 170), (3, 1, 64, 64)])
def test_dense_against_reference(causal, mods, h, hkv, lq, lk):
    """Dense (no layout), causal or not; tails past the tile, Lq < Lk, GQA / MQA; every score modifier."""
    q, k = _qk(2, h, hkv, lq, lk)
    _compare(q, k, causal=causal, **_mods(mods, h, lk))


@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tile,block", [(16, None), (16, 32), (32, 64)])
def test_block_sparse_against_reference(mask, causal, tile, block):
    """Layouts with partial tiles, globals, sinks, random pairs and empty rows; cells of one or more tiles."""
    lq = lk = 150
    q, k = _qk(1, 4, 2, lq, lk, seed=1)
    _compare(
        q,
        k,
        causal=causal,
        block_mask=block_mask(MASKS[mask](lq, lk), tile),
        block=block,
        alibi_slopes=torch.tensor([0.1, 0.3, 0.0, 1.0], dtype=torch.float64),
    )


def test_sinks_and_window_parameters():
    q, k = _qk(1, 2, 2, 130, 130, seed=2)
    for sink_k, window in ((0, 1), (1, 3), (70, 64), (200, 500)):
        _compare(q, k, causal=True, sink_k=sink_k, window=window)


def test_cells_never_exceed_the_display_and_are_tile_multiples():
    assert pooled_block(16384) == 64 and pooled_block(16385) == 128 and pooled_block(10) == 64
    assert pooled_block(1000, max_cells=4) == 256 and pooled_block(1000, max_cells=4, tile=16) == 256
    for L in (1, 63, 64, 65, 1000, 16384, 100_000):
        b = pooled_block(L)
        assert b % 64 == 0 and -(-L // b) <= 256
    q, k = _qk(1, 1, 1, 700, 700, d=4)
    out = pooled_attention(q, k, causal=True, max_cells=3)
    assert out.mass.shape == (1, 1, 3, 3) and out.block_q == 256


def test_stats_against_their_formulas():
    """Statistics written out from p directly (not through pool_probs)."""
    q, k = _qk(1, 2, 2, 90, 90, seed=4)
    out = pooled_attention(q, k, causal=True, sink_k=2, window=5)
    _, p = attention_ref(q, k, torch.zeros_like(k), causal=True)
    rel = relative_positions(90, 90).abs()
    torch.testing.assert_close(out.entropy, -(p * torch.log(p.clamp_min(1e-300))).sum(-1))
    torch.testing.assert_close(out.distance, (p * rel).sum(-1))
    torch.testing.assert_close(out.sink, p[..., 0] + p[..., 1])
    torch.testing.assert_close(out.local, (p * (rel < 5)).sum(-1))
    assert float(out.entropy[0, 0, 0]) == 0.0 and float(out.distance[0, 0, 0]) == 0.0  # first query: itself only


@settings(max_examples=25, deadline=None)
@given(
    lq=st.integers(1, 140),
    extra=st.integers(0, 40),
    h=st.sampled_from([1, 2, 4]),
    g=st.sampled_from([1, 2]),
    causal=st.booleans(),
    tile=st.sampled_from([16, 32, 64]),
    density=st.floats(0.05, 1.0),
    seed=st.integers(0, 2**16),
)
def test_every_query_block_puts_mass_one(lq, extra, h, g, causal, tile, density, seed):
    """Property: a query block whose rows all have an allowed key puts total mass one on the keys."""
    lk = lq + extra
    q, k = _qk(1, h * g, h, lq, lk, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(lq, lk, generator=gen) < density
    mask |= _band(lq, lk, 1)  # every query may attend itself
    out = pooled_attention(q, k, causal=causal, block_mask=block_mask(mask, tile))
    torch.testing.assert_close(out.mass.sum(-1), torch.ones_like(out.mass.sum(-1)), atol=1e-12, rtol=0)
    assert (out.mass >= 0).all() and (out.sink <= 1 + 1e-12).all() and (out.local <= 1 + 1e-12).all()


def test_float32_long_sequence_is_close_to_float64():
    q, k = _qk(1, 2, 2, 1100, 1100, d=16, seed=5)
    a = pooled_attention(q.float(), k.float(), causal=True)
    b = pooled_attention(q, k, causal=True)
    for name in STATS:
        torch.testing.assert_close(getattr(a, name).double(), getattr(b, name), atol=2e-3, rtol=1e-4, msg=name)


def test_arguments_are_checked():
    q, k = _qk(1, 2, 2, 10, 10)
    with pytest.raises(ValueError, match="multiple of the layout tile"):
        pooled_attention(q, k, block=48)
    with pytest.raises(ValueError, match="Lq=20 > Lk=10"):
        pooled_attention(torch.cat([q, q], 2), k)
    with pytest.raises(ValueError, match="window"):
        pooled_attention(q, k, window=0)
    with pytest.raises(ValueError, match="block mask is for"):
        pooled_attention(q, k, block_mask=block_mask(torch.ones(12, 12, dtype=torch.bool), 16))


class _LargestTensor(TorchDispatchMode):
    """Records the largest number of elements of any tensor an aten op returns inside the block."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("causal,mask", [(True, None), (False, None), (False, "band")])
def test_never_an_L_by_L_tensor(causal, mask):
    """At 4096 tokens no op of the pass returns a tensor of even an eighth of L x L elements."""
    L = 4096
    q, k = _qk(1, 1, 1, L, L, d=8, seed=6)
    q, k = q.float(), k.float()
    bm = None if mask is None else block_mask(_band(L, L, 100), 64)
    with _LargestTensor() as seen:
        out = pooled_attention(q, k, causal=causal, block_mask=bm)
    assert out.mass.shape == (1, 1, 64, 64)
    assert 0 < seen.largest < L * L // 8, seen.largest
