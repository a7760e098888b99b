"""What one redraw of the Attention tab sends: small enough for a 10 Mbit/s viewer, still exact enough.

The grid's heatmaps travel as uint8 colour levels (``plots.quantise``); these tests hold the
payload to the issue's 500 kB at the default config, as Gradio serialises it, and check the levels
against the model's own probabilities (the independent reference): blank exactly where a pair is
not allowed, and each level within half a step of the probability it stands for.
"""
import json

import gradio as gr
import numpy as np
import pytest

from explorer import experiments as ex
from explorer import plots
from explorer.share import DEFAULT_TEXT
from models import ModelConfig

BUDGET = 500_000  # bytes per redraw of the attention tab


@pytest.fixture(scope="module")
def default_maps():
    return ex.attention_maps(ModelConfig(), DEFAULT_TEXT)


def _wire_bytes(fig) -> int:
    """Bytes of the figure as Gradio's Plot component sends it (JSON of its PlotData)."""
    return len(json.dumps(gr.Plot().postprocess(fig).model_dump()))


def test_default_redraw_fits_the_budget(default_maps):
    grid = plots.attention_grid(default_maps)
    stats = plots.attention_stats(default_maps)
    assert len(default_maps.tokens) == len(DEFAULT_TEXT.encode()) and len(grid.data) == 16
    assert _wire_bytes(grid) + _wire_bytes(stats) <= BUDGET
    assert all(t.z.dtype == np.uint8 for t in grid.data)


def test_levels_stand_for_the_probabilities(default_maps):
    grid = plots.attention_grid(default_maps)
    step, top = grid.layout.meta["p_step"], grid.layout.meta["p_max"]
    assert step == pytest.approx(top / plots.LEVELS)
    for k, trace in enumerate(grid.data):
        ref = default_maps.attention[k // 4, k % 4].astype(np.float64)
        z = np.asarray(trace.z, dtype=np.float64)
        assert np.array_equal(z == 0, ref == 0)  # blank exactly where the pair is not allowed (causal)
        inside = (ref >= step / 2) & (ref <= top)
        np.testing.assert_allclose(z[inside] * step, ref[inside], atol=step / 2 + 1e-12)
        assert np.all(z[ref > top] == plots.LEVELS) and np.all(z[(ref > 0) & (ref < step / 2)] == 1)


def test_quantise_is_monotone_and_keeps_tiny_probabilities_visible():
    p = np.array([0.0, np.nan, 1e-9, 0.1, 0.2, 0.2000001, 0.5, 2.0])
    q = plots.quantise(p, step=0.5 / plots.LEVELS)
    assert q.dtype == np.uint8 and q[0] == 0 and q[1] == 0 and q[2] == 1 and q[-1] == plots.LEVELS
    assert np.all(np.diff(q[2:].astype(int)) >= 0)


def test_grid_stays_readable(default_maps):
    grid = plots.attention_grid(default_maps)
    lay = grid.layout
    assert "Attention maps: full" in lay.title.text
    bar = lay.coloraxis.colorbar
    assert "probability" in bar.title.text and bar.ticktext[-1] == f"{lay.meta['p_max']:.2g}"
    assert lay.coloraxis.colorscale[0][1] == lay.plot_bgcolor  # level 0 (blank) shows the background
    assert lay.xaxis13.title.text == "head 0" and lay.yaxis.title.text == "layer 0"
