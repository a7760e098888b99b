"""kernels.cpu.implicit_bands: the blocks on and below the diagonal of Mamba-2's and the gated delta rule's
implicit maps equal the dense maps' blocks (float64), at lengths that are not a multiple of the width, and
their window mass equals the dense map's."""

import pytest
import torch

from kernels.cpu.delta_rule import gated_delta_map
from kernels.cpu.implicit_bands import delta_blocks, delta_cells, ssd_blocks, ssd_cells, window_mass
from kernels.cpu.ssd import ssd_map

D = torch.float64


def _ssd(L, g):
    gen = torch.Generator().manual_seed(g)
    dt = torch.nn.functional.softplus(torch.randn(2, 4, L, generator=gen, dtype=D))
    a = -torch.rand(4, generator=gen, dtype=D) - 0.1
    b, c = torch.randn(2, 2, L, 3, generator=gen, dtype=D), torch.randn(2, 2, L, 3, generator=gen, dtype=D)
    return (dt, a, b, c), ssd_map(dt, a, b, c)


def _delta(L, g):
    gen = torch.Generator().manual_seed(g)
    q = torch.nn.functional.normalize(torch.randn(2, 3, L, 5, generator=gen, dtype=D), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(2, 3, L, 5, generator=gen, dtype=D), dim=-1)
    beta = torch.rand(2, 3, L, generator=gen, dtype=D)
    gate = -torch.rand(2, 3, L, generator=gen, dtype=D) * 0.3
    return (q, k, beta, gate), gated_delta_map(q, k, beta, gate)


@pytest.mark.parametrize("make, blocks", [(_ssd, ssd_blocks), (_delta, delta_blocks)])
@pytest.mark.parametrize("L, W", [(37, 8), (64, 16), (5, 8)])
def test_blocks_are_the_dense_maps_blocks(make, blocks, L, W):
    args, dense = make(L, L + W)
    diag, sub = blocks(*args, W)
    n = -(-L // W)
    full = torch.nn.functional.pad(dense, (0, n * W - L, 0, n * W - L))  # (B, h, nW, nW)
    for k in range(n):
        rows = slice(k * W, (k + 1) * W)
        torch.testing.assert_close(diag[:, :, k], full[..., rows, rows], atol=1e-12, rtol=1e-10)
        if k:
            prev = slice((k - 1) * W, k * W)
            torch.testing.assert_close(sub[:, :, k], full[..., rows, prev], atol=1e-12, rtol=1e-10)
    assert (sub[:, :, 0] == 0).all()
    i = torch.arange(L)
    near = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - W)  # (L, L): 0 <= i - j < W
    torch.testing.assert_close(window_mass(diag, sub, L), (dense * near).sum(-1), atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("make, cells", [(_ssd, ssd_cells), (_delta, delta_cells)])
@pytest.mark.parametrize("L, S", [(37, 8), (64, 16), (5, 8), (130, 32)])
def test_cells_are_block_sums_of_the_dense_map(make, cells, L, S):
    args, dense = make(L, L + S)
    n = -(-L // S)
    full = torch.nn.functional.pad(dense, (0, n * S - L, 0, n * S - L))
    want = full.view(*dense.shape[:2], n, S, n, S).sum((3, 5))
    torch.testing.assert_close(cells(*args, S).to(want.dtype), want, atol=1e-12, rtol=1e-10)
