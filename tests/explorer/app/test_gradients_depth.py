"""The Gradients tab's Theorem 1 panel (``explorer.app.tabs.parts.gradients_depth``): the depth sweep of the
config above its per-layer profile, and the profile alone when no depth could be measured."""

import functools

from explorer.analysis.gradients import depth_scaling as analysis
from explorer.analysis.gradients.norms import placement_results
from explorer.app.tabs.parts import gradients_depth
from explorer.runtime import budget
from models import ModelConfig

SMALL = ModelConfig(n_layers=2, d_model=32, n_heads=2)


def test_the_panel_draws_the_depth_sweep_above_the_per_layer_profile(monkeypatch):
    monkeypatch.setattr(
        gradients_depth, "depth_scaling", functools.partial(analysis.depth_scaling, depths=(2, 4), seeds=1)
    )
    per_layer, _ = placement_results(SMALL)
    fig, reading = gradients_depth.depth_panel(SMALL, None, per_layer)
    assert fig.layout.title.text.startswith("Theorem 1 (Xiong et al. 2020)")
    assert {t.xaxis or "x" for t in fig.data} == {"x", "x2", "x3", "x4"}
    depth = analysis.depth_scaling(SMALL, depths=(2, 4), seeds=1)
    pre = next(t for t in fig.data if t.name.startswith("pre (current)"))
    assert list(pre.y) == depth["placements"]["pre"]["last"]
    assert "From 2 to 4 layers" in reading and "Theorem 1" in reading


def test_no_measurable_depth_leaves_the_per_layer_figure(monkeypatch):
    monkeypatch.setattr(
        gradients_depth, "depth_scaling", functools.partial(analysis.depth_scaling, depths=(2,), seeds=1)
    )
    monkeypatch.setattr(budget, "request_budget", lambda: 1)  # nothing fits
    assert gradients_depth.depth_panel(SMALL, None, {}) is None


def test_the_gradients_tab_opens_on_theorem_1_with_the_bundles_as_stars():
    from explorer.analysis.weights.bundled import bundled_weights
    from explorer.app.tabs.gradients import gradients_outputs
    from explorer.runtime.text import DEFAULT_TEXT

    cfg = ModelConfig()  # the page's first paint: the 'default' bundle (pre-LN); 'post_ln' is its post-LN twin
    out = gradients_outputs(cfg, DEFAULT_TEXT, bundled_weights(cfg))
    fig, reading = out["grad"], out["grad_md"]
    assert fig.layout.title.text.startswith("Theorem 1 (Xiong et al. 2020)")
    stars = {t.name for t in fig.data if t.mode == "markers"}
    assert stars == {"post, trained ('post_ln' bundle)", "pre, trained ('default' bundle)"}
    assert "does not shrink with depth" in reading and "last layer ÷ first layer" in reading  # both panels read
