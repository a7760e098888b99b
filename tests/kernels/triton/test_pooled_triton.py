"""The Triton pooled-map kernels, interpreted on CPU tensors, against the dense reference pooled the
same way (small sizes: the interpreter is slow)."""

import pytest
import torch

from kernels import attention_ref, block_mask
from kernels.pooled_dense import pool_probs
from kernels.triton.pooled import aot_specs, pooled_triton, unsupported_reason

STATS = ("mass", "entropy", "distance", "sink", "local")
TOL = {torch.float32: 2e-4, torch.float16: 3e-3}


def _check(
    h, hkv, lq, lk, *, dtype=torch.float32, causal=True, mask=None, block=64, sink_k=3, window=9, seed=0, d=32, **mods
):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, h, lq, d, generator=g).to(dtype)
    k = torch.randn(1, hkv, lk, d, generator=g).to(dtype)
    bm = None if mask is None else block_mask(mask, 64)
    out = pooled_triton(
        q,
        k,
        causal=causal,
        block_mask=bm,
        scale=d**-0.5,
        block_q=block,
        block_k=block,
        sink_k=sink_k,
        window=window,
        **mods,
    )
    mods64 = {n: t.double() if isinstance(t, torch.Tensor) else t for n, t in mods.items()}
    _, p = attention_ref(q.double(), k.double(), k.double(), causal=causal, block_mask=bm, **mods64)
    ref = pool_probs(p, block, block, sink_k=sink_k, window=window)
    tol = TOL[dtype]
    for name in STATS:
        want = getattr(ref, name)
        scale = max(1.0, float(want.abs().max()))
        torch.testing.assert_close(getattr(out, name).double(), want, atol=tol * scale, rtol=tol, msg=name)


@pytest.mark.parametrize("causal", [True, False])
def test_dense_gqa_tails(causal):
    """Dense walk: the unmasked bulk and the causal / tail band; GQA; Lq < Lk."""
    _check(4, 2, 70, 150, causal=causal)


def test_dense_modifiers_two_tile_cells():
    _check(
        2,
        1,
        140,
        140,
        block=128,
        alibi_slopes=torch.tensor([0.3, 0.05]),
        rel_bias=torch.randn(2, 279, generator=torch.Generator().manual_seed(1)),
        softcap=4.0,
    )


def test_block_sparse_layout_with_sinks():
    """Full and partial blocks of a layout (band + first keys), modifiers on."""
    i, j = torch.arange(150)[:, None], torch.arange(150)[None, :]
    mask = ((i - j).abs() < 40) | (j < 3)
    _check(2, 2, 150, 150, causal=False, mask=mask, sink_k=5, window=20, alibi_slopes=torch.tensor([0.1, 0.0]))


def test_half_precision():
    _check(2, 1, 100, 100, dtype=torch.float16, seed=2)


def test_tiles_of_their_own():
    """The pooled pass's own tiles (pooled_triton._POOLED_TILE): fp32 d 128 on 32 x 16, fp16 d 32 dense
    with modifiers on 64 x 32; the lse pass keeps the forward's."""
    _check(1, 1, 80, 80, d=128, seed=3)
    _check(2, 1, 90, 90, dtype=torch.float16, seed=4, alibi_slopes=torch.tensor([0.2, 0.4]))


def test_refusals_and_specs():
    q = torch.zeros(1, 1, 8, 32)
    assert unsupported_reason(q, q, rel_k=torch.zeros(1, 3, 32)) is not None
    assert "cell columns" in unsupported_reason(q, q, max_cols=257)
    assert unsupported_reason(torch.zeros(1, 1, 8, 48), torch.zeros(1, 1, 8, 48)) is not None
    names = [name for name, *_ in aot_specs(quick=False)]
    for kind in ("dense", "dense mod", "sparse", "sparse mod"):
        for dd in ("fp16 d64", "bf16 d128", "fp32 d32"):
            assert any(n.startswith(f"_pooled_fwd {dd} {kind} ") for n in names), (dd, kind)
    with pytest.raises(ValueError, match="cell columns"):
        pooled_triton(q, torch.zeros(1, 1, 300 * 64, 32), scale=1.0, block_q=64, block_k=64)
