"""Curves stay apart for colour-blind readers and log axes label decades only.

Colour vision deficiency is simulated with Machado, Oliveira & Fernandes (2009)'s matrices at severity
1.0 (dichromacy), applied to linear RGB; colours are compared by their CIE76 distance in CIELAB (D65).
Every pair of norm placements, and the A and B sides of every Compare figure, must differ either in
simulated colour by at least ``MIN_DELTA_E`` or in both marker and dash. The simulation itself is
checked against the complaint it answers: the old red and green (post-LN and sandwich) collapse."""

import itertools
import math

import numpy as np
import plotly.graph_objects as go
import pytest

from explorer.figures.base import decade_ticks
from explorer.figures.compare import ab_sweep_figure, gradient_compare_figure
from explorer.figures.gradients import (
    GRAD_PANELS,
    PLACEMENT_COLORS,
    PLACEMENT_DASHES,
    PLACEMENT_MARKERS,
    gradient_figure,
)

MACHADO = {  # severity 1.0, linear RGB
    "protanopia": np.array(
        [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]]
    ),
    "deuteranopia": np.array(
        [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]]
    ),
}
MIN_DELTA_E = 20.0  # CIE76: ~2.3 is a just noticeable difference; 20 reads as two colours on a projector


def _linear(hex_colour: str) -> np.ndarray:
    c = np.array([int(hex_colour.lstrip("#")[i : i + 2], 16) / 255 for i in (0, 2, 4)])
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def _lab(linear_rgb: np.ndarray) -> np.ndarray:
    m = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = m @ np.clip(linear_rgb, 0, 1) / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def delta_e(a: str, b: str, deficiency: str | None = None) -> float:
    sim = (lambda c: MACHADO[deficiency] @ c) if deficiency else (lambda c: c)
    return float(np.linalg.norm(_lab(sim(_linear(a))) - _lab(sim(_linear(b)))))


def test_the_simulation_reproduces_the_complaint_and_the_reference_values():
    assert delta_e("#000000", "#ffffff") == pytest.approx(100, abs=0.1)  # L* from 0 to 100
    white = _linear("#ffffff")
    for m in MACHADO.values():  # a dichromat sees greys unchanged (each row sums to 1)
        assert np.allclose(m @ white, white, atol=1e-3)
    old_post, old_sandwich = "#d62728", "#2ca02c"  # Plotly's red and green, as the Gradients tab had them
    assert delta_e(old_post, old_sandwich) > 60
    assert delta_e(old_post, old_sandwich, "deuteranopia") < MIN_DELTA_E  # one colour
    # a protanope sees one hue too (a*b* angles within 10 degrees), the red only darker
    hues = [
        math.degrees(math.atan2(lab[2], lab[1]))
        for lab in (_lab(MACHADO["protanopia"] @ _linear(c)) for c in (old_post, old_sandwich))
    ]
    assert abs(hues[0] - hues[1]) < 10


def _apart(style_a: tuple, style_b: tuple, deficiency: str) -> bool:
    (ca, ma, da), (cb, mb, db) = style_a, style_b
    return delta_e(ca, cb, deficiency) >= MIN_DELTA_E or (ma != mb and da != db)


@pytest.mark.parametrize("deficiency", sorted(MACHADO))
def test_every_pair_of_placements_stays_apart(deficiency):
    assert delta_e(PLACEMENT_COLORS["post"], PLACEMENT_COLORS["sandwich"], deficiency) >= MIN_DELTA_E
    for a, b in itertools.combinations(sorted(PLACEMENT_COLORS), 2):
        assert PLACEMENT_MARKERS[a] != PLACEMENT_MARKERS[b] and PLACEMENT_DASHES[a] != PLACEMENT_DASHES[b], (a, b)


def _grad(placement: str, scale: float) -> dict:
    return {**{key: [scale * 10**-k for k in range(4)] for key, _ in GRAD_PANELS}, "norm_placement": placement}


def _sides(fig: go.Figure) -> dict:
    """legendgroup -> (colour, marker symbol, dash) of its first line trace"""
    out = {}
    for t in fig.data:
        if t.legendgroup in ("A", "B") and t.legendgroup not in out and "lines" in (t.mode or ""):
            out[t.legendgroup] = (t.line.color, t.marker.symbol, t.line.dash)
    return out


def _records(ms: float) -> list:
    return [
        {"seq_len": n, "ms": ms * n / 64, "peak_bytes": n * 2**20, "status": "ok", "backend": "cpu"}
        for n in (64, 128, 256, 512)
    ]


@pytest.mark.parametrize("deficiency", sorted(MACHADO))
@pytest.mark.parametrize("placements", [("pre", "pre"), ("post", "sandwich"), ("post", "pre"), ("rezero", "none")])
def test_compare_sides_stay_apart(deficiency, placements):
    figs = [
        gradient_compare_figure(_grad(placements[0], 1.0), _grad(placements[1], 2.0)),
        ab_sweep_figure(_records(1.0), _records(3.0), "A config", "B config"),
    ]
    for fig in figs:
        sides = _sides(fig)
        assert set(sides) == {"A", "B"}
        assert sides["A"][1] != sides["B"][1] and sides["A"][2] != sides["B"][2], sides  # marker and dash
        assert _apart(sides["A"], sides["B"], deficiency), sides


def test_gradient_figure_placements_wear_their_marker_and_dash():
    fig = gradient_figure({"post": _grad("post", 1.0), "sandwich": _grad("sandwich", 1.0)}, "post")
    styles = {}
    for t in fig.data:
        if "lines" in (t.mode or "") and t.line.color:
            styles.setdefault(t.line.color.upper(), (t.marker.symbol, t.line.dash))
    post, sandwich = styles[PLACEMENT_COLORS["post"].upper()], styles[PLACEMENT_COLORS["sandwich"].upper()]
    assert post[0] != sandwich[0] and post[1] != sandwich[1], styles


def _log_fig(values: list, **axis) -> go.Figure:
    return go.Figure([go.Scatter(x=list(range(len(values))), y=values)], layout=dict(yaxis=dict(type="log", **axis)))


def test_log_axes_label_whole_decades_only():
    fig = decade_ticks(_log_fig([3e-4, 0.02, 0.5, 7.0]))
    y = fig.layout.yaxis
    assert y.dtick == 1 and y.exponentformat == "power" and y.minor.dtick == "D1"  # labels 10^-3 ... 10^0
    assert decade_ticks(_log_fig([2.0, 8.0])).layout.yaxis.dtick is None  # no decade inside: Plotly's own ticks
    assert decade_ticks(_log_fig([1e-3, 1.0], tickvals=[1e-3, 1.0])).layout.yaxis.dtick is None  # its own ticks
    linear = go.Figure([go.Scatter(x=[0, 1], y=[1e-3, 10.0])])
    assert decade_ticks(linear).layout.yaxis.dtick is None


def test_compare_log_axes_label_decades():
    fig = gradient_compare_figure(_grad("post", 1.0), _grad("pre", 1.0))  # values over three decades
    for name in ("yaxis", "yaxis2", "yaxis3"):
        assert fig.layout[name].dtick == 1, name
    sweep = ab_sweep_figure(_records(0.01), _records(30.0), "a", "b")  # ms over five decades
    assert sweep.layout.yaxis.dtick == 1 and sweep.layout.xaxis.tickvals is not None


def test_the_gradients_figure_labels_decades():
    fig = gradient_figure({"post": _grad("post", 1.0), "pre": _grad("pre", 1.0)}, "post")
    logs = [name for name in fig.layout if name.startswith("yaxis") and fig.layout[name].type == "log"]
    assert logs and all(fig.layout[name].dtick == 1 for name in logs)


def test_every_registered_placement_has_its_own_colour_marker_and_dash():
    from models import choices

    placements = set(choices()["norm_placement"])
    assert placements <= set(PLACEMENT_COLORS) & set(PLACEMENT_MARKERS) & set(PLACEMENT_DASHES)
    assert len({PLACEMENT_COLORS[p].upper() for p in placements}) == len(placements)
