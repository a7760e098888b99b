"""d(rel_bias) of the Triton backward: per-tile diagonal sums overlap-added without atomics.

``rel_bias_grad`` is checked against a plain loop over the scratch layout it documents, and the
whole backward (interpreted) is bitwise reproducible.
"""

import pytest
import torch

from kernels.triton.flash.launcher import _flash, rel_bias_grad


def _loop_reference(scratch, B, h, lq, lk, bm, bn):
    bh, nqb, nkb, dw = scratch.shape
    out = torch.zeros(h, 2 * lk - 1, dtype=torch.float64)
    for x in range(bh):
        for qb in range(nqb):
            for kb in range(nkb):
                for t in range(dw):
                    rel = kb * bn - qb * bm + t - (bm - 1) - (lk - lq)  # j - (i + off)
                    idx = rel + lk - 1
                    if 0 <= idx < 2 * lk - 1:
                        out[x % h, idx] += float(scratch[x, qb, kb, t])
                    else:
                        assert scratch[x, qb, kb, t] == 0  # such sums come from padded rows / cols
    return out


@pytest.mark.parametrize("B,h,lq,lk,bm,bn", [(1, 2, 40, 40, 16, 16), (2, 1, 30, 50, 16, 32), (1, 1, 33, 70, 32, 16)])
def test_overlap_add_matches_the_loop(B, h, lq, lk, bm, bn):
    g = torch.Generator().manual_seed(lq + lk)
    nqb, nkb, dw = -(-lq // bm), -(-lk // bn), 2 * max(bm, bn)
    scratch = torch.randn(B * h, nqb, nkb, dw, generator=g)
    # Zero what no real (row, key) pair can produce, as the kernel's masked ds does.
    for qb in range(nqb):
        for kb in range(nkb):
            for t in range(dw):
                ok = [(a, t + a - (bm - 1)) for a in range(bm)]
                ok = [(a, c) for a, c in ok if 0 <= c < bn and qb * bm + a < lq and kb * bn + c < lk]
                if not ok:
                    scratch[:, qb, kb, t] = 0
    got = rel_bias_grad(scratch, B, h, lq, lk, bm, bn)
    assert got.shape == (h, 2 * lk - 1)
    torch.testing.assert_close(got.double(), _loop_reference(scratch, B, h, lq, lk, bm, bn), atol=1e-5, rtol=1e-5)


def test_rel_bias_gradient_is_bitwise_reproducible():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 2, 45, 32, generator=g)
    k = torch.randn(2, 1, 60, 32, generator=g)
    v = torch.randn(2, 1, 60, 32, generator=g)
    rb = torch.randn(2, 2 * 60 - 1, generator=g).requires_grad_()
    do = torch.randn(2, 2, 45, 32, generator=g)
    grads = []
    for _ in range(2):
        out = _flash(q, k, v, causal=True, rel_bias=rb, config=dict(BLOCK_M=16, BLOCK_N=32))
        grads.append(torch.autograd.grad(out, rb, do)[0])
    assert torch.equal(grads[0], grads[1])
