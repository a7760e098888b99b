"""Triton flash attention (interpreted on CPU tensors) against kernels.reference.attention_ref."""

import pytest
import torch

from kernels.block_mask import block_mask
from kernels.reference import attention_ref
from kernels.triton.flash.launcher import _flash, flash_attention, unsupported_reason

TOL = {torch.float32: 2e-4, torch.float16: 2e-2, torch.bfloat16: 8e-2}
SMALL = dict(BLOCK_M=32, BLOCK_N=32)


def _inputs(B, h, h_kv, lq, lk, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)

    def mk(*s):
        return torch.randn(*s, generator=g).to(dtype).requires_grad_()

    return mk(B, h, lq, d), mk(B, h_kv, lk, d), mk(B, h_kv, lk, d)


def _check(q, k, v, *, config=None, rel_bias=None, split=None, **kw):
    tol = TOL[q.dtype]
    out = _flash(q, k, v, config=config, rel_bias=rel_bias, split=split, **kw)
    ref, _ = attention_ref(q, k, v, rel_bias=rel_bias, **kw)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), ref.float(), atol=tol, rtol=tol)
    ins = [q, k, v] + ([rel_bias] if rel_bias is not None else [])
    do = torch.randn_like(out)
    got = torch.autograd.grad(out, ins, do)
    want = torch.autograd.grad(ref, ins, do)
    for name, a, b in zip(["dq", "dk", "dv", "drel_bias"], got, want):
        assert torch.isfinite(a).all(), name
        scale = max(1.0, b.float().abs().max().item())
        torch.testing.assert_close(a.float(), b.float(), atol=tol * scale, rtol=tol, msg=name)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("h,h_kv,lq,lk", [(2, 2, 70, 70), (4, 2, 40, 97), (2, 1, 33, 33)])
def test_dense_fp32(causal, h, h_kv, lq, lk):
    """Tails (L not a multiple of 32), Lq < Lk, GQA and MQA."""
    _check(*_inputs(1, h, h_kv, lq, lk, 32, torch.float32), causal=causal, config=SMALL)


@pytest.mark.parametrize("config", [dict(BLOCK_M=64, BLOCK_N=32), dict(BLOCK_M=16, BLOCK_N=64)])
def test_dense_other_tiles(config):
    _check(*_inputs(1, 2, 2, 130, 130, 32, torch.float32), causal=True, config=config)


def test_default_tiles_and_head_dim_64():
    q, k, v = _inputs(2, 2, 1, 65, 65, 64, torch.float32, seed=3)
    out = flash_attention(q, k, v, causal=True)
    torch.testing.assert_close(out, attention_ref(q, k, v, causal=True)[0], atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_dtypes(dtype, request):
    if dtype == torch.bfloat16:
        request.getfixturevalue("bf16_dot")  # the Triton 3.9 interpreter's bf16 tl.dot is broken
    _check(
        *_inputs(1, 2, 1, 50, 70, 32, dtype, seed=1), causal=True, config=SMALL, alibi_slopes=torch.tensor([0.5, 0.25])
    )


@pytest.mark.parametrize("mods", ["alibi", "rel_bias", "softcap", "all"])
def test_modifiers(mods):
    q, k, v = _inputs(1, 2, 1, 45, 77, 32, torch.float32, seed=2)
    kw = {}
    if mods in ("alibi", "all"):
        kw["alibi_slopes"] = torch.tensor([0.5, 0.125])
    if mods in ("rel_bias", "all"):
        kw["rel_bias"] = torch.randn(2, 2 * 77 - 1).requires_grad_()
    if mods in ("softcap", "all"):
        kw["softcap"] = 2.0
    _check(q, k, v, causal=mods == "all", config=SMALL, scale=0.3, **kw)


def _random_pattern(lq, lk, seed, p=0.25):
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(lq, lk, generator=g) < p
    m[3] = False  # an empty row
    return m


@pytest.mark.parametrize("block,causal", [(32, False), ((32, 16), True), (16, True)])
def test_block_mask_random(block, causal):
    """Partial and full tiles, an empty row, Lq < Lk with tails; rel_bias gradient."""
    lq, lk = (70, 90) if block != 16 else (40, 50)
    bm = block_mask(_random_pattern(lq, lk, seed=4), block)
    q, k, v = _inputs(1, 2, 1, lq, lk, 32, torch.float32, seed=5)
    _check(q, k, v, block_mask=bm, causal=causal, rel_bias=torch.randn(2, 2 * lk - 1).requires_grad_())


def test_block_mask_structured_sliding_window_and_global():
    L, w = 100, 20
    i = torch.arange(L)[:, None]
    j = torch.arange(L)[None, :]
    pattern = ((i - j).abs() <= w) | (j < 4) | (i < 4)
    pattern[50:60] = False  # empty rows in the middle of a block
    bm = block_mask(pattern, 32)
    assert bm.tiles.shape[0] > 0 and (bm.kv_tile < 0).any()  # both full and partial blocks
    q, k, v = _inputs(1, 2, 2, L, L, 32, torch.float32, seed=6)
    _check(q, k, v, block_mask=bm, alibi_slopes=torch.tensor([0.1, 0.2]), softcap=3.0)


def test_block_mask_64_all_full_blocks():
    """Block 64 (the app's) with only full blocks: no partial tiles at all."""
    L = 128
    pattern = torch.zeros(L, L, dtype=torch.bool)
    pattern[:64, :64] = True
    pattern[64:, :] = True
    bm = block_mask(pattern, 64)
    assert bm.tiles.shape[0] == 0
    _check(*_inputs(1, 1, 1, L, L, 32, torch.float32, seed=7), block_mask=bm)


@pytest.mark.parametrize("mods", [{}, {"alibi": True, "rel_bias": True}])
def test_block_mask_64_runs_as_smaller_program_tiles(mods):
    """fp32 on the app's 64 x 64 layout tiles runs 32-wide program tiles: partial-tile masks,
    the causal diagonal and the tails must be read at the right offsets inside the layout tile."""
    from kernels.triton.flash.common import sparse_meta

    for kern in ("fwd", "dkdv", "dq"):
        meta = sparse_meta(64, 4, 64, 64, kern, bool(mods))
        assert (meta["BQ"], meta["BK"]) == (64, 64) and meta["BLOCK_M"] * meta["BLOCK_N"] < 64 * 64
    lq, lk = 150, 170
    i = torch.arange(lq)[:, None] + (lk - lq)
    j = torch.arange(lk)[None, :]
    pattern = ((i - j >= 0) & (i - j < 45)) | (j < 3)  # window + global keys: partial tiles
    bm = block_mask(pattern, 64)
    assert bm.tiles.shape[0] > 0
    q, k, v = _inputs(1, 4, 2, lq, lk, 64, torch.float32, seed=9)
    extra = {}
    if mods:
        extra = dict(
            alibi_slopes=torch.tensor([0.05, 0.1, 0.2, 0.3]), rel_bias=torch.randn(4, 2 * lk - 1).requires_grad_()
        )
    _check(q, k, v, block_mask=bm, causal=True, **extra)


@pytest.mark.parametrize("sparse", [False, True])
def test_fp32_head_dim_128(sparse):
    """fp32 with d = 128 (32 x 32 program tiles), dense causal and on a 64 x 64 layout."""
    lq = lk = 100
    q, k, v = _inputs(1, 2, 1, lq, lk, 128, torch.float32, seed=10)
    assert unsupported_reason(q, k, v) is None
    if not sparse:
        _check(q, k, v, causal=True)
        return
    i = torch.arange(lq)[:, None]
    j = torch.arange(lk)[None, :]
    bm = block_mask(((i - j).abs() < 30) | (j < 2), 64)
    _check(q, k, v, block_mask=bm, causal=True, alibi_slopes=torch.tensor([0.1, 0.2]), softcap=5.0)


def test_fully_masked_rows_give_zero_and_no_nan():
    L = 40
    pattern = torch.zeros(L, L, dtype=torch.bool)
    pattern[20:, :10] = True
    q, k, v = _inputs(1, 1, 1, L, L, 32, torch.float32, seed=8)
    out = flash_attention(q, k, v, block_mask=block_mask(pattern, 32))
    assert (out[0, 0, :20] == 0).all()
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and (q.grad[0, 0, :20] == 0).all()


def test_unsupported_arguments_are_reported():
    q = torch.randn(1, 2, 8, 48)
    assert "head dim" in unsupported_reason(q, q, q)
    q = torch.randn(1, 2, 8, 32)
    assert "rel_k" in unsupported_reason(q, q, q, rel_k=torch.zeros(1, 3, 32))
    with pytest.raises(ValueError, match="tile"):
        flash_attention(q, q, q, block_mask=block_mask(torch.ones(8, 8, dtype=torch.bool), 8))


@pytest.mark.parametrize("block", [32, (32, 16)])
def test_block_mask_full_blocks_cut_by_causal(block):
    """An all-allowed layout with causal: below-diagonal blocks run the unmasked body, blocks on
    the diagonal the masked one without a tile, blocks above it are skipped (Lq < Lk, GQA)."""
    lq, lk = 80, 112
    bm = block_mask(torch.ones(lq, lk, dtype=torch.bool), block)
    assert bm.tiles.shape[0] > 0 or (bm.kv_tile < 0).all()
    q, k, v = _inputs(1, 4, 2, lq, lk, 32, torch.float32, seed=11)
    _check(q, k, v, block_mask=bm, causal=True, rel_bias=torch.randn(4, 2 * lk - 1).requires_grad_())


def test_gpu_launcher_accepts_exactly_the_compiled_layout_tiles():
    """On a GPU (meta tensors stand in for CUDA ones) only the BlockMask tiles kernels.tools.aot_check
    compiles are accepted; the sparse specialisations it compiles are exactly those tiles."""
    from kernels.tools.aot_check import _flash_specs
    from kernels.triton.flash.launcher import BLOCK_SIZES, GPU_LAYOUTS

    q = torch.empty(1, 2, 128, 64, dtype=torch.float16, device="meta")
    q_cpu = torch.empty(1, 2, 128, 64, dtype=torch.float16)
    accepted = set()
    for bq in BLOCK_SIZES:
        for bk in BLOCK_SIZES:
            bm = block_mask(torch.ones(128, 128, dtype=torch.bool), (bq, bk))
            if unsupported_reason(q, q, q, block_mask=bm) is None:
                accepted.add((bq, bk))
            assert unsupported_reason(q_cpu, q_cpu, q_cpu, block_mask=bm) is None  # interpreter
    assert accepted == set(GPU_LAYOUTS)
    compiled = {
        tuple(int(x) for x in name.split("/")[1].split()[0].split("x"))
        for name, *_ in _flash_specs(False)
        if " sparse " in name
    }
    assert compiled == set(GPU_LAYOUTS)


@pytest.mark.parametrize("split,sparse", [(2, False), (4, True)])
def test_dkdv_group_split_matches_the_reference(split, sparse):
    """GQA at batch 1 with the dK/dV kernel split over the query-head group (partial sums per
    split, summed afterwards): gradients equal the reference's."""
    lq = lk = 70
    bm = block_mask(_random_pattern(lq, lk, seed=12, p=0.5), 32) if sparse else None
    q, k, v = _inputs(1, 4, 1, lq, lk, 32, torch.float32, seed=13)
    kw = dict(block_mask=bm) if sparse else dict(config=SMALL)
    _check(q, k, v, causal=True, split=split, alibi_slopes=torch.tensor([0.1, 0.2, 0.3, 0.4]), **kw)


def test_dkdv_split_choice():
    from kernels.triton.flash.launcher import dkdv_split

    assert dkdv_split("cpu", 4, 8) == 1  # the interpreter never splits
    with pytest.raises(ValueError, match="split"):
        _flash(*_inputs(1, 4, 1, 16, 16, 32, torch.float32), split=3)
