"""Gathered groups of the CPU path (keys gathered by sub-blocks, ``kernels/cpu/compact.py``): every
structured pattern of the catalogue, run through the block-sparse path, equals the dense masked
reference forward and backward; the gathered rows hold exactly the sub-blocks the pattern uses, and
the work done follows those keys, not the tiles they lie in."""

import pytest
import torch
from test_cpu_attention import _macs, _mods

from kernels import attention_ref, block_mask
from kernels.cpu.attention import block_sparse_attention
from kernels.cpu.plan import GATHERED, plan
from models import ModelConfig
from models.attention import PATTERNS, pattern_block_mask, pattern_mask
from models.attention.sparse import segment_mask

# The catalogue's defaults on the models' 64-key tiles, and smaller sizes on 32-key tiles (more tiles
# per row at a test's length, random blocks of 8 keys, attention sinks).
SIZES = {
    "default": ({}, 64),
    "small": (
        {
            "window": 24,
            "block_size": 8,
            "n_random": 3,
            "n_global": 3,
            "stride": 12,
            "n_summary": 2,
            "dilation": 3,
            "n_sinks": 4,
        },
        32,
    ),
}


def _qkv(h, hkv, lq, lk, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(2, n, L, d, generator=g, dtype=dtype).requires_grad_() for n, L in ((h, lq), (hkv, lk), (hkv, lk))
    ]


def _check(out, ref, leaves, tol):
    torch.testing.assert_close(out, ref, **tol)
    go = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, leaves, go), torch.autograd.grad(ref, leaves, go)):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize("key", list(PATTERNS))
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("lens", [(333, 0), (200, 45)])  # no tile multiple; keys before the segment
def test_every_pattern_matches_the_dense_reference(key, causal, size, lens):
    params, tile = SIZES[size]
    lq, prefix = lens
    cfg = ModelConfig(attention=key, causal=causal, max_len=lq, **params)
    bm = pattern_block_mask(cfg, lq, prefix, block=tile)
    q, k, v = _qkv(4, 2, lq, prefix + lq, 16, torch.float64)
    out = block_sparse_attention(q, k, v, bm, scale=0.25)
    ref, _ = attention_ref(q, k, v, mask=segment_mask(cfg, lq, prefix), scale=0.25)
    _check(out, ref, [q, k, v], {"rtol": 1e-10, "atol": 1e-10})


@pytest.mark.parametrize("key", ["bigbird", "longformer"])
@pytest.mark.parametrize("causal", [True, False])
def test_fp32_at_a_longer_odd_length(key, causal):
    L = 1000
    cfg = ModelConfig(attention=key, causal=causal, max_len=L)
    bm = pattern_block_mask(cfg, L)
    groups, _ = plan(bm, L, L, "cpu")
    assert any(grp.kind == GATHERED for grp in groups) or (key, causal) == ("longformer", False)
    q, k, v = _qkv(4, 4, L, L, 32, torch.float32)
    out = block_sparse_attention(q, k, v, bm, scale=32**-0.5)
    ref, _ = attention_ref(q, k, v, mask=pattern_mask(cfg, L), scale=32**-0.5)
    _check(out, ref, [q, k, v], {"rtol": 2e-5, "atol": 2e-5})


@pytest.mark.parametrize("mod", ["alibi", "rel_bias", "softcap", "shaw", "xl"])
@pytest.mark.parametrize("heads", [(4, 4), (4, 1)])
@pytest.mark.parametrize("causal", [True, False])
def test_score_modifiers_on_gathered_groups(mod, heads, causal):
    """ALiBi and a relative bias ride in the fused call's mask; a softcap and relative tables run the
    strips over the same gathered sub-blocks."""
    L = 301
    cfg = ModelConfig(attention="bigbird", causal=causal, max_len=L, **SIZES["small"][0])
    bm = pattern_block_mask(cfg, L, block=32)
    h, hkv = heads
    q, k, v = _qkv(h, hkv, L, L, 8, torch.float64)
    mods = _mods(mod, h, L, 8)
    out = block_sparse_attention(q, k, v, bm, scale=0.3, **mods)
    ref, _ = attention_ref(q, k, v, mask=pattern_mask(cfg, L), scale=0.3, **mods)
    leaves = [q, k, v] + [t for t in mods.values() if isinstance(t, torch.Tensor) and t.requires_grad]
    _check(out, ref, leaves, {"rtol": 1e-10, "atol": 1e-10})


@pytest.mark.parametrize("causal", [True, False])
def test_random_key_blocks_with_empty_rows(causal):
    """A BigBird-like mask of random 8-key blocks on 32-key tiles, its first rows allowed nothing:
    those rows give zeros (the strips over the gathered sub-blocks), the rest equal the reference;
    ``causal`` cuts the blocks above the diagonal on top."""
    L, g = 250, torch.Generator().manual_seed(4)
    blocks = torch.rand(-(-L // 8), -(-L // 8), generator=g) < 0.12
    mask = blocks.repeat_interleave(8, 0).repeat_interleave(8, 1)[:L, :L].clone()
    mask |= torch.eye(L, dtype=torch.bool)
    mask[:5] = False
    q, k, v = _qkv(4, 2, L, L, 8, torch.float64)
    bm = block_mask(mask, 32)
    groups, _ = plan(bm, L, L, "cpu")
    assert {grp.bk for grp in groups} == {8}
    out = block_sparse_attention(q, k, v, bm, causal=causal, scale=0.3, softcap=3.0)
    ref, _ = attention_ref(q, k, v, mask=mask, causal=causal, scale=0.3, softcap=3.0)
    assert (out[:, :, :5] == 0).all()
    _check(out, ref, [q, k, v], {"rtol": 1e-10, "atol": 1e-10})


@pytest.mark.parametrize("causal", [True, False])
def test_gathered_rows_hold_exactly_the_used_sub_blocks(causal):
    """Each gathered query block reads the 16-key sub-blocks holding a key the pattern allows to one of
    its rows, no other, with the pattern's own element mask over them; every query block is in one
    group, and the gathered groups hold all but a few (the first ones, whose tiles the window fills
    anyway, and the ragged last one, whose padded rows allow nothing)."""
    L, bq = 1000, 64
    cfg = ModelConfig(attention="bigbird", causal=causal, max_len=L)
    mask = pattern_mask(cfg, L)
    groups, _ = plan(pattern_block_mask(cfg, L), L, L, "cpu")
    nqb = -(-L // bq)
    padded = torch.zeros(nqb * bq, nqb * bq, dtype=torch.bool)
    padded[:L, :L] = mask
    gathered = [grp for grp in groups if grp.kind == GATHERED]
    assert sum(grp.rows.numel() for grp in gathered) >= nqb - 6
    for grp in gathered:
        s = grp.bk
        assert s == 16  # BigBird's blocks
        for r, row in enumerate(grp.rows.tolist()):
            rows = padded[row * bq : (row + 1) * bq]  # (bq, keys)
            used = rows.view(bq, -1, s).any(0).any(-1).nonzero().flatten()
            assert torch.equal(grp.idx[r], used)
            keys = (used[:, None] * s + torch.arange(s)).flatten()
            assert torch.equal(grp.window[r], rows[:, keys])
    every = torch.cat([grp.rows for grp in groups]).sort().values
    assert torch.equal(every, torch.arange(nqb))


def test_bigbird_work_follows_its_used_keys():
    """Counted multiply-adds of BigBird, forward and backward: those of the 16-key sub-blocks each
    query block uses (within 5%), about half of its visited 64 x 64 tiles'."""
    L, h, d = 2048, 2, 16
    for causal in (True, False):
        cfg = ModelConfig(attention="bigbird", causal=causal, max_len=L)
        bm = pattern_block_mask(cfg, L)
        mask = pattern_mask(cfg, L)
        q, k, v = _qkv(h, h, L, L, d, torch.float32)
        used = int(mask.view(L // 64, 64, L // 16, 16).any(3).any(1).sum())  # (query block, sub-block) pairs
        keys = 2 * 2 * h * used * 64 * 16 * d  # q k^T and p v over them, batch of 2
        tiles = 2 * 2 * h * bm.n_visited * 64 * 64 * d
        out = []
        fwd = _macs(lambda: out.append(block_sparse_attention(q, k, v, bm, scale=0.25)))
        bwd = _macs(lambda: out[0].sum().backward())
        assert fwd <= 1.05 * keys and bwd <= 2 * 1.05 * keys, (causal, fwd / keys, bwd / keys)
        assert fwd <= 0.6 * tiles, (causal, fwd / tiles)


@pytest.mark.parametrize("mod", ["none", "alibi", "rel_bias"])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2)])
def test_chunked_gathered_rows_without_autograd(monkeypatch, mod, heads):
    """Without autograd a gathered group runs in chunks of rows (one row each here): each chunk reads
    its own rows' masks and score modifiers, and the whole equals the reference."""
    import kernels.cpu.attention as cpu

    monkeypatch.setattr(cpu, "_GATHER_BYTES", 1)
    L = 517
    cfg = ModelConfig(attention="bigbird", causal=True, max_len=L)
    bm = pattern_block_mask(cfg, L)
    assert max(grp.rows.numel() for grp in plan(bm, L, L, "cpu")[0] if grp.kind == GATHERED) > 1
    h, hkv = heads
    q, k, v = (t.detach() for t in _qkv(h, hkv, L, L, 8, torch.float64))
    mods = {name: t.detach() for name, t in _mods(mod, h, L, 8).items()}
    with torch.no_grad():
        out = block_sparse_attention(q, k, v, bm, scale=0.3, **mods)
    ref, _ = attention_ref(q, k, v, mask=pattern_mask(cfg, L), scale=0.3, **mods)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
