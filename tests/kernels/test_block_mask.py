"""BlockMask layout: round trip, full/partial split, ascending indices."""

import pytest
import torch

from kernels import block_mask


@pytest.mark.parametrize("shape,block", [((37, 37), 8), ((64, 64), 16), ((21, 50), (8, 16)), ((5, 5), 64)])
@pytest.mark.parametrize("density", [0.0, 0.1, 0.5, 1.0])
def test_round_trip(shape, block, density):
    g = torch.Generator().manual_seed(0)
    mask = torch.rand(shape, generator=g) < density
    bm = block_mask(mask, block)
    assert torch.equal(bm.to_dense(), mask)


def test_full_blocks_are_unmasked_and_partial_blocks_carry_their_tile():
    L = 32
    mask = (torch.arange(L)[:, None] // 8) == (torch.arange(L)[None] // 8)
    mask[0, 20] = True  # one partial tile in block row 0
    bm = block_mask(mask, 8)
    assert bm.kv_counts.tolist() == [2, 1, 1, 1]
    assert bm.kv_tile[0, 0] == -1 and bm.kv_tile[0, 1] >= 0
    assert bm.tiles.shape[0] == 1 and bm.tiles[0].sum() == 1
    for qb in range(4):
        idx = bm.kv_indices[qb, : bm.kv_counts[qb]]
        assert torch.all(idx[1:] > idx[:-1])


def test_tail_blocks_are_partial():
    bm = block_mask(torch.ones(10, 10, dtype=torch.bool), 8)
    assert bm.kv_tile[0, 0] == -1  # the 8x8 corner is full
    assert (bm.kv_tile[1] >= 0).all()  # the tail row only partially exists


def test_rejects_bad_input():
    with pytest.raises(ValueError):
        block_mask(torch.ones(4, 4), 2)
    with pytest.raises(ValueError):
        block_mask(torch.ones(4, 4, dtype=torch.bool), 0)
