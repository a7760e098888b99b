"""NSA's selected-block attention (kernels/selected.py, kernels/triton/selected.py), the Triton kernels interpreted:
forward and dq, dk, dv against a float64 reference written here (per query head and position: the tokens ``<= t``
of the selected blocks of its K/V head, a softmax over them), GQA groups of 1, 2, 4 and 20 (two row groups of 16),
several block sizes ``l'`` (under, at and over one key tile, not a power of two) and head widths, positions that
select fewer blocks than the most (and one selecting none); the index transposes against loops; the PyTorch path
against the same reference; and the NSA core with the Triton path forced against its CPU path, outputs and
gradients. The interpreter is slow: the first cases of each test are the fast loop's, the rest ``exhaustive``."""

import functools
import math

import pytest
import torch

import kernels
from kernels.selected import selected_attention, selected_flops, selected_torch
from kernels.triton.selected import GM, key_major, meta, query_major, unsupported_reason
from models import ModelConfig, build_model


def _selection(B, hkv, L, blk, n, seed, empty_row=None):
    """NSA-like: block 0 and the own block always, then random earlier blocks up to ``n`` (fewer for early
    positions and, randomly, for others); nothing after the own block. ``empty_row``: a position selecting none."""
    g = torch.Generator().manual_seed(seed)
    n_s = -(-L // blk)
    t = torch.arange(L)
    own = t // blk
    score = torch.rand(B, hkv, L, n_s, generator=g)
    score[..., t, own] = 2.0
    score[..., 0] = 2.0
    score = score.masked_fill(torch.arange(n_s) > own[:, None], -1.0)
    keep = torch.randint(2, n + 1, (B, hkv, L, 1), generator=g)  # how many this position keeps
    rank = score.argsort(-1, descending=True).argsort(-1)
    sel = (rank < keep) & (score >= 0)
    if empty_row is not None:
        sel[..., empty_row, :] = False
    return sel


def _reference(q, k, v, sel, blk):
    """float64: for every query head ``n`` and position ``t``, softmax over ``{i <= t : sel[n // G, t, i // l']}``
    of ``q_t . k_i / sqrt(d)``; a position with no such key gives 0."""
    B, h, L, d = q.shape
    G = h // k.shape[1]
    out = torch.zeros(B, h, L, d, dtype=torch.float64)
    for b in range(B):
        for n in range(h):
            for t in range(L):
                keys = [i for i in range(t + 1) if sel[b, n // G, t, i // blk]]
                if not keys:
                    continue
                s = torch.stack([q[b, n, t] @ k[b, n // G, i] for i in keys]) / math.sqrt(d)
                p = torch.softmax(s, 0)
                out[b, n, t] = sum(p[m] * v[b, n // G, i] for m, i in enumerate(keys))
    return out


def _inputs(B, h, hkv, L, d, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, n, L, d, generator=g).requires_grad_() for n in (h, hkv, hkv)]


def _against_reference(fn, B, h, hkv, L, d, blk, n, seed=0, empty_row=None, tol=2e-5):
    q, k, v = _inputs(B, h, hkv, L, d, seed)
    sel = _selection(B, hkv, L, blk, n, seed, empty_row)
    out = fn(q, k, v, sel, blk)
    do = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 1))
    got = [out, *torch.autograd.grad(out, [q, k, v], do)]
    ins = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = _reference(*ins, sel, blk)
    want = [ref, *torch.autograd.grad(ref, ins, do.double())]
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want):
        torch.testing.assert_close(a.double(), b, atol=tol, rtol=tol, msg=name)
    return got, sel


def _triton(q, k, v, sel, blk, **kw):
    return selected_attention(q, k, v, sel, blk, force_triton=True, **kw)


# (B, h, h_kv, L, d, l', n): GQA 1, 2, 4, 20; l' below, at and above one key tile, 24 (not a power of two)
CASES = [
    (1, 4, 2, 19, 16, 8, 3),
    (1, 4, 1, 21, 32, 4, 4),
    (1, 2, 2, 20, 16, 16, 3),
    (2, 4, 1, 30, 16, 24, 3),
    (1, 2, 1, 26, 64, 8, 4),
    (1, 20, 1, 10, 16, 4, 3),
    (1, 2, 1, 40, 128, 64, 2),
    (1, 8, 2, 36, 32, 32, 3),
]


@pytest.mark.parametrize("B,h,hkv,L,d,blk,n", CASES)
def test_triton_matches_the_float64_reference(B, h, hkv, L, d, blk, n):
    with kernels.record_backends() as ran:
        _against_reference(_triton, B, h, hkv, L, d, blk, n)
    assert ran == ["triton (interpreter) nsa-selected"]


def test_a_position_selecting_nothing_gives_zero_and_no_gradient():
    (out, dq, _, _), sel = _against_reference(_triton, 1, 2, 1, 18, 16, 8, 3, seed=3, empty_row=11)
    assert not sel[0, 0, 11].any()
    assert torch.all(out[0, :, 11] == 0) and torch.all(dq[0, :, 11] == 0)


def test_dkdv_position_lists_split_into_chunks(monkeypatch):
    """Position lists walked in chunks of 4 (5 chunks over L = 18; block 0's list is all 18): the partial sums
    add up to the reference's dk, dv."""
    import kernels.triton.selected as tri

    monkeypatch.setattr(tri, "DKDV_CHUNK", 4)
    _against_reference(_triton, 1, 2, 1, 18, 16, 4, 3, seed=4)


def test_max_blocks_keeps_only_that_many_index_columns():
    """``max_blocks`` = the most any position selects: the same result as with every column."""
    q, k, v = _inputs(1, 2, 2, 16, 16, 5)
    sel = _selection(1, 2, 16, 4, 3, 5)
    most = int(sel.sum(-1).max())
    assert most == 3 and int(sel.sum(-1).min()) < most
    torch.testing.assert_close(_triton(q, k, v, sel, 4, max_blocks=most), _triton(q, k, v, sel, 4))


def test_backward_is_bitwise_reproducible():
    q, k, v = _inputs(1, 2, 1, 12, 16, 6)
    sel = _selection(1, 1, 12, 4, 3, 6)
    do = torch.randn(1, 2, 12, 16)
    runs = [torch.autograd.grad(_triton(q, k, v, sel, 4), [q, k, v], do) for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(*runs))


@pytest.mark.parametrize("B,h,hkv,L,d,blk,n", [CASES[0], CASES[3]])
def test_torch_path_matches_the_float64_reference(B, h, hkv, L, d, blk, n):
    _against_reference(selected_torch, B, h, hkv, L, d, blk, n, tol=1e-5)


def test_index_transposes_against_loops():
    sel = _selection(2, 3, 23, 4, 4, 7, empty_row=9)
    S, L, n_s = 6, 23, sel.shape[-1]
    idx, cnt = query_major(sel, 4)
    tpos, toff = key_major(idx, cnt, n_s)
    flat = sel.reshape(S, L, n_s)
    for s in range(S):
        for t in range(L):
            want = [j for j in range(n_s) if flat[s, t, j]]
            assert cnt[s, t] == len(want) and idx[s, t, : len(want)].tolist() == want
        for j in range(n_s):
            got = tpos[toff[s * n_s + j] : toff[s * n_s + j + 1]].tolist()
            assert got == [t for t in range(L) if flat[s, t, j]]
    assert toff[-1] == sel.sum()


def test_flops_count_the_allowed_pairs():
    sel = _selection(1, 2, 21, 4, 3, 8)
    q = torch.zeros(1, 4, 21, 16)
    pairs = sum(int(sel[0, g, t, i // 4]) for g in range(2) for t in range(21) for i in range(t + 1))
    assert selected_flops(q, sel, 4) == 4 * 2 * 16 * pairs


def test_refusals_and_tiles():
    q = torch.zeros(1, 4, 8, 16)
    sel = torch.ones(1, 2, 8, 1, dtype=torch.bool)
    assert unsupported_reason(q, q[:, :2], q[:, :2], sel, 8) is None
    assert "fp32" in unsupported_reason(q.double(), q[:, :2].double(), q[:, :2].double(), sel, 8)
    assert "head dim 8" in unsupported_reason(q[..., :8], q[:, :2, :, :8], q[:, :2, :, :8], sel, 8)
    assert kernels.selected_backend(q, q[:, :2], q[:, :2], sel, 8) == "torch-cpu block-sparse"  # CPU tensors
    assert [meta(64, b)["BLOCK_N"] for b in (1, 8, 16, 24, 64, 128)] == [16, 16, 16, 32, 64, 64]
    assert meta(128, 128)["BLOCK_N"] == 32 and meta(128, 128, "dkdv")["BLOCK_N"] == 16 and GM == 16
    assert meta(64, 64, "dkdv")["BLOCK_N"] == 32  # its resident fp32 dK / dV tiles: one step narrower
    with pytest.raises(ValueError, match="do not cover"):
        selected_attention(q, q[:, :2], q[:, :2], sel, 4)


def _nsa_core(n_kv_heads, **kw):
    cfg = ModelConfig(
        attention="nsa",
        position="rope",
        d_model=64,
        n_heads=4,
        n_kv_heads=n_kv_heads,
        n_layers=1,
        max_len=64,
        nsa_cmp_block=8,
        nsa_cmp_stride=4,
        **kw,
    ).validate()
    torch.manual_seed(0)
    return build_model(cfg).stack.blocks[0].attn.core


@pytest.mark.parametrize("n_kv_heads,slc", [(2, dict(nsa_slc_block=8, nsa_slc_top_n=3)), (1, dict(nsa_slc_block=16))])
def test_nsa_core_triton_path_matches_its_cpu_path(monkeypatch, n_kv_heads, slc):
    """The core's sparse forward (d_h = 16) with the selected branch forced onto the Triton kernels gives the
    CPU path's output and gradients for q (gate logits included), k and v."""
    core = _nsa_core(n_kv_heads, **slc)
    B, L, hkv = 1, 27, n_kv_heads
    g = torch.Generator().manual_seed(1)
    q = torch.randn(B, 4, L, 16 + 3, generator=g).requires_grad_()
    k = torch.randn(B, 3 * hkv, L, 16, generator=g).requires_grad_()
    v = torch.randn(B, 3 * hkv, L, 16, generator=g).requires_grad_()
    do = torch.randn(B, 4, L, 16, generator=g)

    def run():
        out = core.sparse(q, k, v)
        return [out, *torch.autograd.grad(out, [q, k, v], do)]

    with kernels.record_backends() as ran:
        cpu = run()
    assert not any("nsa-selected" in r for r in ran)
    monkeypatch.setattr(kernels, "selected_attention", functools.partial(selected_attention, force_triton=True))
    with kernels.record_backends() as ran:
        tri = run()
    assert ran.count("triton (interpreter) nsa-selected") == 1
    for name, a, b in zip(("out", "dq", "dk", "dv"), tri, cpu):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-5, msg=name)
