"""kernels/triton/flash/plan.py: the full / partial block lists encode exactly the pattern (AND causal),
full blocks need no mask at all, and the plan is built once per BlockMask, device and causality."""

import pytest
import torch

from kernels.block_mask import block_mask
from kernels.triton.flash.plan import triton_plan


def _pattern(lq, lk, seed):
    g = torch.Generator().manual_seed(seed)
    i = torch.arange(lq)[:, None] + (lk - lq)
    j = torch.arange(lk)[None, :]
    m = ((i - j).abs() < 20) | (j < 5) | (torch.rand(lq, lk, generator=g) < 0.05)
    m[10:14] = False
    return m


def _decode(table, mf, mp, n_groups):
    """{(group, member): tile or None for full} from a packed plan table."""
    out = {}
    for g in range(n_groups):
        n_f, n_p = int(table[g, 0]), int(table[g, 1])
        ids_f = table[g, 2 : 2 + n_f].tolist()
        ids_p = table[g, 2 + mf : 2 + mf + n_p].tolist()
        tiles = table[g, 2 + mf + mp : 2 + mf + mp + n_p].tolist()
        assert ids_f == sorted(ids_f) and ids_p == sorted(ids_p)  # ascending within each kind
        for m in ids_f:
            out[(g, m)] = None
        for m, t in zip(ids_p, tiles):
            assert (g, m) not in out
            out[(g, m)] = t
    return out


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lq,lk,block", [(100, 100, 16), (70, 130, 32), (130, 130, (64, 32)), (64, 64, 64)])
def test_plan_encodes_the_pattern_and_causality(causal, lq, lk, block):
    pattern = _pattern(lq, lk, seed=lq + lk)
    bm = block_mask(pattern, block)
    plan = triton_plan(bm, causal, "cpu")
    bq, bk = bm.block_q, bm.block_k
    want = pattern.clone()
    if causal:
        want &= torch.arange(lk)[None, :] <= torch.arange(lq)[:, None] + (lk - lq)
    q_pairs = _decode(plan.q_major, plan.q_mf, plan.q_mp, bm.n_q_blocks)
    k_pairs = _decode(plan.k_major, plan.k_mf, plan.k_mp, bm.n_k_blocks)
    assert k_pairs == {(kb, qb): t for (qb, kb), t in q_pairs.items()}  # the exact transpose
    assert plan.n_full + plan.n_partial == len(q_pairs)
    got = torch.zeros(bm.n_q_blocks * bq, bm.n_k_blocks * bk, dtype=torch.bool)
    for (qb, kb), t in q_pairs.items():
        rows, cols = slice(qb * bq, (qb + 1) * bq), slice(kb * bk, (kb + 1) * bk)
        block_want = torch.zeros(bq, bk, dtype=torch.bool)
        real = want[rows, cols]
        block_want[: real.shape[0], : real.shape[1]] = real
        if t is None:  # full: every element inside the sequence and allowed, no mask needed
            assert (kb + 1) * bk <= lk and real.shape[1] == bk
            assert real.all(), (qb, kb)
            got[rows, cols] = True
        else:
            tile = torch.ones(bq, bk, dtype=torch.bool) if t < 0 else bm.tiles[t]
            assert tile.shape == (bq, bk)
            got[rows, cols] = tile
            assert (block_want & ~got[rows, cols]).sum() == 0
    got = got[:lq, :lk]
    if causal:
        got &= torch.arange(lk)[None, :] <= torch.arange(lq)[:, None] + (lk - lq)
    assert torch.equal(got, want)
    # No visited block lies entirely above the causal diagonal.
    if causal:
        for qb, kb in q_pairs:
            assert kb * bk <= (qb + 1) * bq - 1 + (lk - lq)


def test_plan_is_memoised_per_device_and_causality():
    bm = block_mask(_pattern(96, 96, 0), 32)
    a = triton_plan(bm, True, "cpu")
    assert triton_plan(bm, True, torch.device("cpu")) is a
    assert triton_plan(bm, False, "cpu") is not a
    assert set(bm.plans) >= {("triton", "cpu", True), ("triton", "cpu", False)}
    assert a.tiles.dtype == torch.int8 and a.q_major.dtype == a.k_major.dtype == torch.int32


def test_all_ones_layout_with_causal_splits_the_diagonal_blocks_off():
    L = 256
    bm = block_mask(torch.ones(L, L, dtype=torch.bool), 64)
    plan = triton_plan(bm, True, "cpu")
    assert (plan.n_full, plan.n_partial) == (6, 4)  # below-diagonal blocks full, diagonal partial
    plan = triton_plan(bm, False, "cpu")
    assert (plan.n_full, plan.n_partial) == (16, 0)
