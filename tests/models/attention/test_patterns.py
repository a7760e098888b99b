"""Section 1 patterns against the catalogue's formulas, written out as plain Python loops."""

import pytest
import torch

from models import ModelConfig
from models.attention import pattern_mask

FORMULAS = {
    "full": lambda i, j, c: True,
    "sliding_window": lambda i, j, c: abs(i - j) < c.window,
    "dilated_window": lambda i, j, c: abs(i - j) < c.window * c.dilation and (i - j) % c.dilation == 0,
    "strided": lambda i, j, c: abs(i - j) <= c.stride or (i - j) % c.stride == 0,
    "fixed": lambda i, j, c: i // c.stride == j // c.stride or j % c.stride >= c.stride - c.n_summary,
    "block_local": lambda i, j, c: i // c.block_size == j // c.block_size,
    "chunked": lambda i, j, c: i // c.attention_chunk_size == j // c.attention_chunk_size,
    "longformer": lambda i, j, c: abs(i - j) < c.window or i < c.n_global or j < c.n_global,
}
PARAMS = [
    dict(window=3, dilation=2, stride=4, n_summary=1, block_size=5, n_global=2, attention_chunk_size=4),
    dict(window=5, dilation=3, stride=3, n_summary=2, block_size=4, n_global=0, attention_chunk_size=7),
    dict(window=1, dilation=1, stride=1, n_summary=1, block_size=1, n_global=1, attention_chunk_size=1),
]


@pytest.mark.parametrize("key", list(FORMULAS))
@pytest.mark.parametrize("params", PARAMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("L", [1, 23])
def test_pattern_matches_formula(key, params, causal, L):
    cfg = ModelConfig(attention=key, causal=causal, **params)
    expected = torch.tensor([[FORMULAS[key](i, j, cfg) and (j <= i or not causal) for j in range(L)] for i in range(L)])
    assert torch.equal(pattern_mask(cfg, L), expected)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("L", [37, 64])
def test_bigbird_adds_random_whole_blocks(causal, L):
    cfg = ModelConfig(attention="bigbird", causal=causal, window=3, n_global=1, n_random=2, block_size=8, seed=4)
    base = torch.tensor(
        [[FORMULAS["longformer"](i, j, cfg) and (j <= i or not causal) for j in range(L)] for i in range(L)]
    )
    m = pattern_mask(cfg, L)
    assert (m | base).equal(m), "bigbird must contain the window + global pattern"
    bs, nb = cfg.block_size, -(-L // cfg.block_size)
    for qb in range(nb):
        rows = slice(qb * bs, min(L, (qb + 1) * bs))
        added = []
        for kb in range(nb):
            cols = slice(kb * bs, min(L, (kb + 1) * bs))
            extra = m[rows, cols] & ~base[rows, cols]
            if extra.any():
                # a random block is a whole block (cut only by the causal AND)
                whole = torch.ones_like(extra)
                if causal:
                    whole = torch.arange(cols.start, cols.stop)[None] <= torch.arange(rows.start, rows.stop)[:, None]
                assert torch.equal(m[rows, cols], whole)
                added.append(kb)
        assert len(added) <= cfg.n_random
        if causal:
            assert all(kb <= qb for kb in added)


def test_bigbird_is_seeded():
    a = ModelConfig(attention="bigbird", n_random=2, block_size=4, window=2, seed=1, causal=False)
    b = a.replace(seed=2)
    assert torch.equal(pattern_mask(a, 64), pattern_mask(a.replace(), 64))
    assert not torch.equal(pattern_mask(a, 64), pattern_mask(b, 64))


def test_bigbird_with_no_random_blocks_is_longformer():
    cfg = ModelConfig(attention="bigbird", n_random=0)
    assert torch.equal(pattern_mask(cfg, 100), pattern_mask(cfg.replace(attention="longformer"), 100))


@pytest.mark.parametrize("key", list(FORMULAS) + ["bigbird"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("L,prefix", [(23, 0), (130, 0), (70, 9)])
def test_block_sparse_layout_encodes_the_pattern(key, causal, L, prefix):
    """The layout built band by band (never the dense matrix) equals the dense pattern."""
    from models.attention import pattern_block_mask

    cfg = ModelConfig(
        attention=key, causal=causal, window=5, stride=6, n_summary=2, block_size=8, n_global=2, n_random=1
    )
    dense = pattern_mask(cfg, L)
    if prefix:
        dense = torch.cat([torch.ones(L, prefix, dtype=torch.bool), dense], dim=1)
    bm = pattern_block_mask(cfg, L, prefix, block=16)
    assert torch.equal(bm.to_dense(), dense)
