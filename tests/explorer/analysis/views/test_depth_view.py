"""The ``exit`` and ``act`` views: every token's exit layer and ACT steps, as the last layer recorded
them, within ``1 .. n_layers``."""

import numpy as np
from view_runs import TEXT, TINY, app_run

from explorer.analysis import attention_maps
from models import ModelConfig


def test_exit_depths_and_act_steps():
    views, out, _ = app_run(ModelConfig(layer="early_exit", exit_threshold=0.004, **TINY))
    d = views.items["exit"]
    assert ((d.depth >= 1) & (d.depth <= 2)).all() and d.threshold == 0.004
    np.testing.assert_array_equal(d.depth, out.layers[-1].exit_depth[0].numpy())
    never = attention_maps(ModelConfig(layer="early_exit", exit_threshold=1.0, **TINY), TEXT).views.items["exit"]
    assert (never.depth == 2).all()
    views, out, _ = app_run(ModelConfig(layer="universal", act=True, n_layers=3, d_model=16, n_heads=2))
    a = views.items["act"]
    assert ((a.depth >= 1) & (a.depth <= 3)).all()
    np.testing.assert_allclose(a.depth, out.layers[-1].act_steps[0].numpy())
