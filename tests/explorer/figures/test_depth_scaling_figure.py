"""The Theorem 1 figure (``explorer.figures.depth_scaling``): what it says it measures, its axes, the
1/sqrt(L) reference through pre-LN's first point, one marker, dash and colour per placement."""

import math

import pytest

from explorer.figures.depth_scaling import CLAIM, depth_figure, depth_reading

DEPTHS = [2, 4, 8, 16]


def _placement(values, slope):
    return {
        "depths": DEPTHS,
        "last": values,
        "per_seed": [[v] for v in values],
        "profile": [[v] for v in values],
        "slope": slope,
        "skipped": {},
    }


@pytest.fixture
def depth():
    return {
        "depths": DEPTHS,
        "d_model": 128,
        "seeds": 2,
        "seq_len": 32,
        "batch": 4,
        "quantity": "ffn_out",
        "parameter": "stack.blocks.{L-1}.ffn.w2.weight",
        "loss": "next-token cross-entropy on random tokens",
        "init": "Xavier",
        "skipped": {},
        "notes": [],
        "placements": {
            "post": _placement([0.5, 0.5, 0.52, 0.55], 0.04),
            "pre": _placement([0.4, 0.28, 0.2, 0.14], -0.5),
            "rezero": _placement([0.0, 0.0, 0.0, 0.0], None),
            "none": _placement([0.01, 0.1, 10.0, 1e4], 4.0),
        },
        "trained": {"post": {"depth": 4, "last": 6.0, "profile": [6.0], "source": "b", "label": "'post_ln' bundle"}},
    }


def _traces(fig):
    return {t.name: t for t in fig.data}


def test_title_and_axes_say_what_is_measured_and_what_the_paper_claims(depth):
    fig = depth_figure(depth, "pre")
    title = fig.layout.title.text.replace("<br>", " ").replace("<sup>", "").replace("</sup>", "")
    assert "Theorem 1 (Xiong et al. 2020)" in title and "stack.blocks.{L-1}.ffn.w2.weight" in title
    assert "does not shrink with depth" in title and "1/√L" in title and "warm-up" in title
    assert "Xavier" in title and "2 seeds" in title and "next-token loss" in title
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert "layers" in fig.layout.xaxis.title.text and "nats" in fig.layout.yaxis.title.text
    assert list(fig.layout.xaxis.tickvals) == DEPTHS
    assert fig.layout.legend.orientation == "h" and fig.layout.legend.y < 0  # below the plots


def test_reference_line_is_one_over_sqrt_depth_through_pre_lns_first_point(depth):
    ref = next(t for t in depth_figure(depth, "pre").data if t.name.startswith("1/√L"))
    assert ref.line.dash == "dash"
    assert list(ref.y) == pytest.approx([0.4 * math.sqrt(2 / d) for d in DEPTHS])


def test_each_placement_has_its_own_marker_dash_and_colour(depth):
    lines = [t for t in depth_figure(depth, "pre").data if t.legendgroup in depth["placements"] and t.mode != "markers"]
    assert len(lines) == 4
    for attr in (lambda t: t.marker.symbol, lambda t: t.line.dash, lambda t: t.line.color):
        assert len({attr(t) for t in lines}) == 4


def test_zero_placement_is_named_in_the_legend_and_off_scale_one_says_where_it_goes(depth):
    names = _traces(depth_figure(depth, "pre"))
    rezero = next(t for n, t in names.items() if n.startswith("rezero"))
    assert "exactly 0" in rezero.name and all(v is None for v in rezero.y)
    none = next(t for n, t in names.items() if n.startswith("none"))
    assert "off the axis" in none.name and "1e+04" in none.name
    lo, hi = depth_figure(depth, "pre").layout.yaxis.range
    assert 10**hi >= 6.0 and 10**lo <= 0.14 and 10**hi < 1e4  # the trained star inside, none outside


def test_trained_point_is_a_star_at_its_own_depth(depth):
    star = next(t for t in depth_figure(depth, "pre").data if t.mode == "markers")
    assert star.marker.symbol == "star" and list(star.x) == [4] and list(star.y) == [6.0]
    assert "'post_ln' bundle" in star.name


def test_per_layer_profile_is_the_second_panel(depth):
    per_layer = {p: {"attn_out": [1.0, 0.5], "ffn_out": [1.0, 0.6], "residual": [2.0, 1.0]} for p in ("pre", "post")}
    fig = depth_figure(depth, "pre", per_layer)
    assert {t.xaxis or "x" for t in fig.data} == {"x", "x2", "x3", "x4"}  # panel 1 on the default axes
    assert fig.layout.yaxis2.domain[1] < fig.layout.yaxis.domain[0]  # below panel 1
    assert any("Per layer" in a.text for a in fig.layout.annotations)


def test_reading_gives_each_placements_change_and_slope(depth):
    text = depth_reading(depth, "pre")
    assert CLAIM in text and "pre 0.4 → 0.14 (×0.35, slope -0.50)" in text
    assert "rezero: exactly 0" in text and "'post_ln' bundle" in text
