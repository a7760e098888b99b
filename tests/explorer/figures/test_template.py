"""Every figure carries the ``plotly_white`` template, whatever Plotly's default was before."""

import json

import plotly.graph_objects as go
import plotly.io as pio
import pytest

from explorer.figures.base import TEMPLATE, base_layout, message_figure
from explorer.figures.latency import kv_cache_figure


@pytest.fixture
def plotly_default():
    before = pio.templates.default
    pio.templates.default = "plotly"  # Plotly's own default, as in a fresh process
    yield
    pio.templates.default = before


def _template(fig) -> dict:
    return json.loads(fig.to_json())["layout"]["template"]


def test_figures_carry_plotly_white_even_when_the_default_was_another(plotly_default):
    white = _template(go.Figure(layout=dict(template="plotly_white")))  # named, under Plotly's default
    assert white != _template(go.Figure()) and TEMPLATE == "plotly_white"
    assert _template(message_figure("nothing yet", "title")) == white
    kv = {
        "seq_len": [128, 256],
        "current": [1.0, 2.0],
        "mha": [1.0, 2.0],
        "mqa": [0.5, 1.0],
        "kv_heads": 4,
        "n_heads": 4,
        "bytes_per_value": 2,
    }
    assert _template(kv_cache_figure(kv)) == white


def test_the_json_equals_that_of_a_figure_naming_the_template(plotly_default):
    lay = base_layout("a title", 300, xaxis=dict(title="x"))
    data = [dict(type="scatter", x=[1, 2, 3], y=[3, 1, 2], name="a")]
    ours = json.loads(go.Figure(data=data, layout=lay).to_json())
    named = json.loads(go.Figure(data=data, layout={**lay, "template": TEMPLATE}).to_json())
    assert ours == named
