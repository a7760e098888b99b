"""The funnel's pool-query block mask is built once per (queries, keys) and reused by every forward, and
it is the block mask of the dense causal pool-query pattern."""

import pytest
import torch

import kernels
from models import ModelConfig, build_model
from models.layers import funnel


@pytest.mark.parametrize("lq,lk", [(11, 21), (64, 128), (65, 130), (1, 2)])
def test_the_cached_mask_is_the_dense_patterns_mask(lq, lk):
    cached = funnel.pool_query_block_mask(lq, lk)
    dense = kernels.block_mask(funnel.pool_query_mask(lq, lk), funnel.KERNEL_BLOCK)
    for name in ("kv_counts", "kv_indices", "kv_tile", "tiles"):
        assert torch.equal(getattr(cached, name), getattr(dense, name)), name
    assert funnel.pool_query_block_mask(lq, lk) is cached


def test_a_second_forward_builds_no_mask(monkeypatch):
    funnel.pool_query_block_mask.cache_clear()
    built = []
    real = kernels.block_mask_from_rows
    monkeypatch.setattr(kernels, "block_mask_from_rows", lambda *a, **k: built.append(a[1:3]) or real(*a, **k))
    monkeypatch.setattr(kernels, "block_mask", lambda *a, **k: pytest.fail("a dense block mask was built"))
    model = build_model(ModelConfig(layer="funnel", n_layers=3, funnel_blocks=3, d_model=32, n_heads=4)).eval()
    tokens = torch.randint(0, 256, (1, 100), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        first = model(tokens).logits
        after_first = list(built)
        again = model(tokens).logits
    assert after_first == [(50, 100), (25, 50)]  # one per pooled block
    assert built == after_first  # the second forward built nothing
    torch.testing.assert_close(first, again)
