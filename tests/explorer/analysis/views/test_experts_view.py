"""The ``experts`` view: the histogram counts every top-k assignment, drops respect the capacity, and
the hash router's experts are a pure function of the token id."""

import numpy as np
import pytest
import torch
from view_runs import TEXT, TINY, app_run

from models import ModelConfig

IDS = list(TEXT.encode())
L = len(IDS)


@pytest.mark.parametrize("ffn,top_k", [("moe", 2), ("switch", 1), ("hash", 1)])
def test_expert_histogram_sums_to_tokens_times_top_k(ffn, top_k):
    cfg = ModelConfig(ffn=ffn, n_experts=3, top_k=2, capacity_factor=1.0, **TINY)
    views, out, model = app_run(cfg)
    e = views.items["experts"]
    assert e.counts.shape == (2, 3) and (e.counts.sum(axis=1) == L * top_k).all() and e.top_k == top_k
    for i, info in enumerate(out.layers):
        np.testing.assert_array_equal(e.counts[i], info.experts.expert_counts.numpy())
        assert e.dropped[i] == info.experts.dropped
        np.testing.assert_array_equal(e.assignment[i], info.experts.assignment[0].numpy())
    if ffn == "hash":  # a pure function of the token id
        table = model.stack.blocks[0].ffn.table
        np.testing.assert_array_equal(e.assignment[0], table[torch.tensor(IDS)].numpy())
        assert (e.dropped == 0).all() and e.capacity == [None, None]
    else:  # nothing kept beyond capacity: kept = assigned - dropped <= E * capacity
        assert (e.counts.sum(1) - e.dropped <= 3 * np.array(e.capacity)).all()
