"""What one redraw of the Attention tab sends: small enough for a 10 Mbit/s viewer, still exact enough.

The grid's heatmaps travel as uint8 colour levels (``quantise``); these tests hold the
payload to 500 kB (the redraw budget) at the default config, as Gradio serialises it, and check the levels
against the model's own probabilities (the independent reference): blank exactly where a pair is
not allowed, and each level within half a step of the probability it stands for.
"""

import json

import gradio as gr
import numpy as np
import pytest
from gradio.components.plot import PlotData

from explorer.analysis import attention_maps
from explorer.app.controls.share import DEFAULT_TEXT
from explorer.app.controls.state import new_state
from explorer.figures.attention import LEVELS, attention_grid, attention_stats, quantise
from models import ModelConfig

BUDGET = 500_000  # bytes per redraw of the attention tab


@pytest.fixture(scope="module")
def default_maps():
    return attention_maps(ModelConfig(), DEFAULT_TEXT)


def _wire_bytes(fig) -> int:
    """Bytes of the figure as Gradio's Plot component sends it (JSON of its PlotData)."""
    return len(json.dumps(gr.Plot().postprocess(fig).model_dump()))  # a PlotData passes through


def test_default_redraw_fits_the_budget(default_maps):
    grid = attention_grid(default_maps)
    stats = attention_stats(default_maps)
    assert len(default_maps.tokens) == len(DEFAULT_TEXT.encode()) and len(grid.data) == 16
    assert _wire_bytes(grid) + _wire_bytes(stats) <= BUDGET
    assert all(t.z.dtype == np.uint8 for t in grid.data)


def test_levels_stand_for_the_probabilities(default_maps):
    grid = attention_grid(default_maps)
    step, top = grid.layout.meta["p_step"], grid.layout.meta["p_max"]
    assert step == pytest.approx(top / LEVELS)
    for k, trace in enumerate(grid.data):
        ref = default_maps.attention[k // 4, k % 4].astype(np.float64)
        z = np.asarray(trace.z, dtype=np.float64)
        assert np.array_equal(z == 0, ref == 0)  # blank exactly where the pair is not allowed (causal)
        inside = (ref >= step / 2) & (ref <= top)
        np.testing.assert_allclose(z[inside] * step, ref[inside], atol=step / 2 + 1e-12)
        assert np.all(z[ref > top] == LEVELS) and np.all(z[(ref > 0) & (ref < step / 2)] == 1)


def test_quantise_is_monotone_and_keeps_tiny_probabilities_visible():
    p = np.array([0.0, np.nan, 1e-9, 0.1, 0.2, 0.2000001, 0.5, 2.0])
    q = quantise(p, step=0.5 / LEVELS)
    assert q.dtype == np.uint8 and q[0] == 0 and q[1] == 0 and q[2] == 1 and q[-1] == LEVELS
    assert np.all(np.diff(q[2:].astype(int)) >= 0)


def test_grid_stays_readable(default_maps):
    grid = attention_grid(default_maps)
    lay = grid.layout
    assert "Attention maps: full" in lay.title.text
    bar = lay.coloraxis.colorbar
    assert "probability" in bar.title.text and bar.ticktext[-1] == f"{lay.meta['p_max']:.2g}"
    assert lay.coloraxis.colorscale[0][1] == lay.plot_bgcolor  # level 0 (blank) shows the background
    assert lay.xaxis13.title.text == "head 0" and lay.yaxis.title.text == "layer 0"


def _event_bytes(out: dict) -> int:
    """Bytes of one event's outputs as Gradio sends them (figures as Plot data, the rest as JSON)."""
    total = 0
    for v in out.values():
        if hasattr(v, "to_plotly_json") or isinstance(v, PlotData):
            total += _wire_bytes(v)
        else:
            total += len(json.dumps(v, default=str))
    return total


def test_the_first_answer_of_a_commit_is_the_grid_alone():
    """A dropdown change's first event carries the grid and small updates only: the statistics and
    the zoomed head follow in the next event (each under the budget on its own), so the grid is
    not waiting for them on a slow link."""
    from explorer.app.controls.fields import config_updates
    from explorer.app.tabs import attention as h
    from explorer.app.tabs.parts import zoom as ui_zoom

    values = {n: u["value"] for n, u in config_updates(ModelConfig(attention="sliding_window")).items()}
    state = {**new_state(ModelConfig(), DEFAULT_TEXT), "seen": True}
    first = h.refresh_attention(values, DEFAULT_TEXT, state, stats=False)
    assert first["stats"] == gr.skip() and isinstance(first["grid"], PlotData)
    grid_alone = _wire_bytes(first["grid"])
    full = attention_grid(attention_maps(ModelConfig(attention="sliding_window"), DEFAULT_TEXT))
    assert json.loads(first["grid"].plot) == json.loads(full.to_json())  # the same figure
    assert grid_alone < _wire_bytes(full)  # sent without Plotly's escaped slashes
    assert _event_bytes(first) <= grid_alone + 12_000  # the rest: status, link, control updates
    detail = h.detail(values, DEFAULT_TEXT, 0, 0, None, first["state"])
    assert set(detail) == {"stats", *ui_zoom.OUTPUTS} and _event_bytes(detail) <= BUDGET
    assert _event_bytes(first) + _event_bytes(detail) <= BUDGET
    # a commit that changes nothing sends next to nothing
    again = h.refresh_attention(values, DEFAULT_TEXT, first["state"], stats=False)
    assert _event_bytes(again) < 4_000  # ~70 "no update" markers
    assert all(v == gr.skip() for v in h.detail(values, DEFAULT_TEXT, 0, 0, None, again["state"]).values())
