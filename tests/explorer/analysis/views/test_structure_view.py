"""The ``funnel``, ``feedback`` and ``sandwich`` views: funnel lengths halve per block (pool-query
layers over unpooled keys); the Feedback memory weights are the softmax of the layer parameters; the
sandwich order is Press et al. 2020's; the figures and reading carry them."""

import math

import numpy as np
import pytest
import torch
from view_runs import REPEATED_TEXT, TEXT, TINY, TINY_ROPE, app_run, model_run

from explorer.analysis import attention_maps
from explorer.app.tabs.views import LABELS
from explorer.figures import views as pv
from explorer.figures.views import views_reading
from models import ModelConfig

L = len(TEXT.encode())
IDS = list(REPEATED_TEXT.encode())


def test_funnel_lengths_halve_per_block():
    cfg = ModelConfig(layer="funnel", n_layers=6, funnel_blocks=3, d_model=16, n_heads=2)
    views = app_run(cfg)[0]
    v = views.items["funnel"]
    per = cfg.n_layers // cfg.funnel_blocks
    q = [-(-L // 2 ** (i // per)) for i in range(cfg.n_layers)]  # ceil(L / 2^block)
    k = [
        -(-L // 2 ** (i // per - (i % per == 0 and i >= per))) for i in range(cfg.n_layers)
    ]  # pool-query: unpooled keys
    assert v.queries.tolist() == q and v.keys.tolist() == k
    fig = pv.view_figures(views)["funnel"]
    assert list(fig.data[0].y) == q and "funnel" in views_reading(views)
    assert "funnel" not in attention_maps(ModelConfig(**TINY), TEXT).views.items


def test_feedback_weights_are_the_softmax_of_the_layer_parameters():
    cfg = ModelConfig(layer="feedback", max_len=64, **TINY_ROPE)
    w = [0.5, -1.0, 2.0]  # embedding, layer 1, layer 2
    views, out, model = model_run(cfg, IDS[:12], lambda m: m.stack.mix.copy_(torch.tensor(w)))  # one step per token
    v = views.items["feedback"]
    ref = np.exp(w) / np.exp(w).sum()
    assert np.allclose(v.weights, ref, atol=1e-6) and math.isclose(v.weights.sum(), 1, abs_tol=1e-6)
    assert v.summary()["heaviest"] == 2


def _paper_order(n: int, s: int) -> str:
    """Press et al. 2020: s attention sublayers, then n - s interleaved pairs, then s FFN sublayers."""
    return "".join("a" if p < s else "f" if p >= 2 * n - s else "af"[(p - s) % 2] for p in range(2 * n))


@pytest.mark.parametrize("n,s", [(1, 0), (2, 0), (2, 1), (3, 1), (4, 2), (3, 3), (5, 4)])
def test_sandwich_order_is_the_papers(n, s):
    cfg = ModelConfig(layer="sandwich", sandwich_coeff=s, **{**TINY_ROPE, "n_layers": n})
    v = model_run(cfg, IDS)[0].items["sandwich"]
    assert v.order == _paper_order(n, s)
    assert v.order.count("a") == n and v.order.count("f") == n
    for j in range(n):  # the j-th FFN runs after the j-th attention
        assert v.layer_of.index(j) < len(v.layer_of) - 1 - v.layer_of[::-1].index(j)
    literal = {(3, 1): "aafaff", (4, 2): "aaafafff", (2, 0): "afaf", (3, 3): "aaafff"}
    if (n, s) in literal:
        assert v.order == literal[(n, s)]


@pytest.mark.parametrize(
    "name,extra,ids",
    [
        ("feedback", dict(layer="feedback", max_len=64), IDS[:16]),
        ("sandwich", dict(layer="sandwich", sandwich_coeff=1), IDS),
    ],
)
def test_structure_figures_carry_the_view(name, extra, ids):
    views = model_run(ModelConfig(**{**TINY_ROPE, **extra}), ids)[0]
    fig = pv.view_figures(views)[name]
    v = views.items[name]
    assert fig.layout.title.text and name in pv.PLOT_NAMES and name in LABELS
    assert all(ax.title.text is not None for ax in (fig.layout.xaxis, fig.layout.yaxis))
    if name == "feedback":
        assert np.allclose(np.asarray(fig.data[0].y), v.weights)
    else:
        assert "".join("af"[z] for z in fig.data[0].z[0]) == v.order
    assert f"**{name}**" in views_reading(views)
