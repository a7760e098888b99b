"""The per-layer gradient figures: an x axis of exactly the layers, readable ticks, and one colour per
norm placement on the Gradients and Compare tabs alike."""

from __future__ import annotations

import pytest

from explorer.figures.compare import COLORS, gradient_compare_figure
from explorer.figures.gradients import PLACEMENT_COLORS, gradient_figure, layer_axis


def _norms(n: int, placement: str, scale: float = 1.0) -> dict:
    vals = [scale * (k + 1) for k in range(n)]
    return {"attn_out": vals, "ffn_out": vals, "residual": vals, "norm_placement": placement}


@pytest.mark.parametrize("n", [1, 4, 12, 24])
def test_layer_axis_spans_exactly_the_layers_with_at_most_nine_ticks(n):
    ax = layer_axis(n)
    lo, hi = ax["range"]
    assert lo == -0.5 and hi == n - 0.5  # no -1 or n from autorange padding
    ticks = list(range(ax["tick0"], n, ax["dtick"]))
    assert ticks[0] == 0 and len(ticks) <= 9


def test_twelve_layers_gradient_figure_axis():
    fig = gradient_figure({"post": _norms(12, "post"), "pre": _norms(12, "pre", 2.0)}, "pre")
    for name in ("xaxis", "xaxis2", "xaxis3"):
        ax = fig.layout[name]
        assert tuple(ax.range) == (-0.5, 11.5)
        assert ax.dtick == 2


def _colour_of(fig, prefix: str) -> str:
    return next(t.line.color for t in fig.data if t.name.startswith(prefix))


def test_post_and_pre_wear_the_same_colours_on_gradients_and_compare():
    grads = gradient_figure({"post": _norms(4, "post"), "pre": _norms(4, "pre", 2.0)}, "pre")
    compare = gradient_compare_figure(_norms(4, "post"), _norms(4, "pre", 2.0))  # A = post, B = pre
    assert _colour_of(compare, "A") == _colour_of(grads, "post") == PLACEMENT_COLORS["post"]
    assert _colour_of(compare, "B") == _colour_of(grads, "pre") == PLACEMENT_COLORS["pre"]
    swapped = gradient_compare_figure(_norms(4, "pre"), _norms(4, "post", 2.0))  # A = pre, B = post
    assert _colour_of(swapped, "A") == PLACEMENT_COLORS["pre"]
    assert _colour_of(swapped, "B") == PLACEMENT_COLORS["post"]


def test_same_placement_sides_keep_the_a_b_colours():
    fig = gradient_compare_figure(_norms(4, "pre"), _norms(4, "pre", 2.0))
    assert _colour_of(fig, "A") == COLORS["A"] and _colour_of(fig, "B") == COLORS["B"]
