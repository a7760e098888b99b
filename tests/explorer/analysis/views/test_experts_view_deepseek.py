"""The ``experts`` view of ``moe_deepseek``: dropless (nothing dropped, no capacity), every top-k choice counted,
each token's first choice shown; with a ``:dense`` first layer, the routed layers only; the figure draws and says
the routing is dropless."""

import numpy as np
from view_runs import TEXT, TINY, app_run

from explorer.figures.views.experts import experts_figure
from models import ModelConfig

L = len(TEXT.encode())
MOE = dict(TINY, ffn="moe_deepseek", n_experts=4, top_k=2, n_group=2, topk_group=1, d_ff=8)


def test_deepseek_experts_view_is_dropless_and_counts_every_choice():
    views, out, _ = app_run(ModelConfig(**MOE))
    e = views.items["experts"]
    assert e.counts.shape == (2, 4) and (e.counts.sum(axis=1) == L * 2).all() and e.top_k == 2
    assert (e.dropped == 0).all() and e.capacity == [None, None]
    for i, info in enumerate(out.layers):
        np.testing.assert_array_equal(e.counts[i], info.experts.expert_counts.numpy())
        np.testing.assert_array_equal(e.assignment[i], info.experts.assignment[0].numpy())
    title = experts_figure(e, list(TEXT)).layout.title.text
    assert "dropless" in title and "hash" not in title


def test_deepseek_experts_view_with_a_dense_first_layer_shows_the_routed_layer():
    cfg = ModelConfig(**{**MOE, "position": "rope", "attention": "mla", "layer_schedule": "mla:dense,mla"})
    views, out, _ = app_run(cfg)
    e = views.items["experts"]
    assert out.layers[0].experts is None and out.layers[1].experts is not None
    assert e.counts.shape == (1, 4)
    np.testing.assert_array_equal(e.counts[0], out.layers[1].experts.expert_counts.numpy())
