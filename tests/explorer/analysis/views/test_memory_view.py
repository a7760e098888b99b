"""The ``memory`` view: memory length per layer and segment, and each query's reach with and without
the memory, against the segment arithmetic of Transformer-XL."""

import numpy as np
from view_runs import TEXT, TINY, app_run

from models import ModelConfig

L = len(TEXT.encode())


def test_memory_view_lengths_and_reach():
    cfg = ModelConfig(memory="xl", segment_len=8, mem_len=6, **TINY)  # full causal attention, rope
    views, out, _ = app_run(cfg)
    m = views.items["memory"]
    assert m.segments == [(0, 8), (8, 8), (16, 4)]
    np.testing.assert_array_equal(m.memory_len, [[0, 6, 6]] * 2)
    pos = np.arange(L)
    start = pos // 8 * 8
    np.testing.assert_array_equal(m.local, pos - start)  # within its segment: back to the segment start
    want = pos - np.maximum(0, np.where(start > 0, start - 6, 0))  # plus the 6 remembered tokens
    np.testing.assert_array_equal(m.reach, np.stack([want, want]))
    np.testing.assert_array_equal(m.reach[0], out.layers[0].reach[0].numpy())
