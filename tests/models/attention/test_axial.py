"""Axial attention (Ho et al. 2019) against dense softmax under the row / column masks."""

from functools import partial

import pytest
import torch
from cores import build_core, draw_qkv, run

import kernels

SMALL = dict(d_model=32, n_heads=4, n_layers=1, max_len=64, position="rope")
core_for = partial(build_core, SMALL)
qkv = draw_qkv


def axial_masks(L, W):
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    return i // W == j // W, i % W == j % W  # same row, same column


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("L,W,h", [(20, 5, 4), (23, 5, 4), (17, 4, 3), (9, 16, 2)])
def test_axial_equals_dense_softmax_under_row_and_column_masks(causal, L, W, h):
    cfg, core = core_for("axial", causal, axial_width=W, n_heads=h, d_model=8 * h)
    q, k, v = qkv(L=L, h=h)
    out, probs, _ = run(core, q, k, v)
    row, col = axial_masks(L, W)
    hr = (h + 1) // 2  # the first ceil(h/2) heads are row heads
    ref_r, p_r = kernels.attention_ref(q[:, :hr], k[:, :hr], v[:, :hr], causal=causal, mask=row)
    ref_c, p_c = kernels.attention_ref(q[:, hr:], k[:, hr:], v[:, hr:], causal=causal, mask=col)
    torch.testing.assert_close(probs, torch.cat([p_r, p_c], 1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, torch.cat([ref_r, ref_c], 1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("position", ["alibi", "t5"])
@pytest.mark.parametrize("causal", [True, False])
def test_axial_bias_is_the_true_distance_of_each_pair(position, causal):
    cfg, core = core_for("axial", causal, axial_width=6, position=position)
    L = 22
    q, k, v = qkv(L=L)
    g = torch.Generator().manual_seed(1)
    mods = (
        {"alibi_slopes": torch.rand(4, generator=g)}
        if position == "alibi"
        else {"rel_bias": torch.randn(4, 2 * L - 1, generator=g)}
    )
    out, probs, _ = run(core, q, k, v, mods)
    row, col = axial_masks(L, 6)
    sub = lambda heads: {n: t[heads] for n, t in mods.items()}  # noqa: E731
    ref_r, p_r = kernels.attention_ref(q[:, :2], k[:, :2], v[:, :2], causal=causal, mask=row, **sub(slice(0, 2)))
    ref_c, p_c = kernels.attention_ref(q[:, 2:], k[:, 2:], v[:, 2:], causal=causal, mask=col, **sub(slice(2, 4)))
    torch.testing.assert_close(probs, torch.cat([p_r, p_c], 1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, torch.cat([ref_r, ref_c], 1), rtol=1e-5, atol=1e-5)


def test_axial_two_bidirectional_layers_connect_every_pair_and_causal_ones_miss_the_later_columns():
    """Reachability of the union of row and column masks composed twice (the paper's receptive field)."""
    L, W = 20, 5
    row, col = axial_masks(L, W)
    one = (row | col).float()
    two = (one @ one) > 0
    assert two.all()
    causal = torch.ones(L, L).tril()
    one_c = one * causal
    two_c = (one_c @ one_c) > 0
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    assert torch.equal(two_c, (j <= i) & (j % W <= i % W))  # earlier row + later column: unreachable
