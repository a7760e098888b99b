"""The attention maps, grid and zoom of the recurrent mixers (Mamba-2, Gated DeltaNet), uniform and in a hybrid
schedule: the implicit maps are flagged per layer, the summary says their rows are not distributions (and is no
error), and the figures draw them on the diverging scale with that said, never as probabilities."""

import numpy as np
import pytest

from explorer.analysis.maps.attention import attention_maps
from explorer.figures.attention import IMPLICIT_NOTE, attention_grid, attention_stats, signed_colorscale
from explorer.figures.training import attention_figure
from explorer.figures.zoom import head_figure
from models import ModelConfig

SMALL = dict(n_layers=4, d_model=32, n_heads=2)
TEXT = "a recurrent layer's map, a recurrent layer's map"
CASES = {
    "mamba2": (dict(attention="mamba2", ffn="none", position="none"), [True] * 4),
    "gated_deltanet": (dict(attention="gated_deltanet"), [True] * 4),
    "hybrid": (dict(attention="full", layer_schedule="gated_deltanet*3,full", position="rope"), [True] * 3 + [False]),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    kw, flags = CASES[request.param]
    return attention_maps(ModelConfig(**SMALL, **kw).validate(), TEXT), flags


def test_the_implicit_layers_are_flagged_and_read_as_no_distributions(case):
    maps, flags = case
    assert maps.implicit == flags
    s = maps.summary()
    assert s["row_sums_ok"]  # finite rows of no fixed sum: by design, not an error
    assert "implicit map" in s["rows"] and "rows are not distributions" in s["rows"]
    assert ("other layers' rows are distributions" in s["rows"]) == (not all(flags))
    att = np.nan_to_num(maps.attention)
    sums = att.sum(-1)  # (n_maps, h, L)
    implicit = np.array(flags)
    # the implicit maps are lower triangular and some rows are off one (or signed); a softmax layer's rows sum to 1
    assert np.allclose(np.triu(att[implicit], 1), 0)
    assert not np.allclose(sums[implicit], 1, atol=1e-3) or (att[implicit] < 0).any()
    if not all(flags):
        assert np.allclose(sums[~implicit], 1, atol=1e-3)


def test_the_grid_draws_signed_weights_and_says_what_they_are(case):
    maps, _ = case
    fig = attention_grid(maps)
    assert fig.layout.coloraxis.colorscale == tuple(tuple(s) for s in signed_colorscale())
    assert fig.layout.coloraxis.cmin == -fig.layout.coloraxis.cmax
    assert IMPLICIT_NOTE in fig.layout.title.text and "probability" not in fig.layout.coloraxis.colorbar.title.text
    assert fig.layout.meta["implicit"] and fig.layout.meta["signed"]
    assert all("weight" in t.hovertemplate and "p ≈" not in t.hovertemplate for t in fig.data)
    z = np.array(fig.data[0].z, dtype=float)  # the values themselves: signed weights, not colour levels
    want = maps.attention[0, 0]
    shown = np.isfinite(z)
    np.testing.assert_allclose(z[shown], np.round(want[shown], 4), atol=1e-6)


def test_the_zoom_of_an_implicit_head_is_diverging_and_a_softmax_head_stays_probabilities(case):
    maps, flags = case
    fig = head_figure(maps, 0, 1)
    heat = fig.data[0]
    assert heat.zmin == -heat.zmax and heat.colorbar.title.text == "weight"
    assert IMPLICIT_NOTE in fig.layout.title.text and "probability" not in fig.layout.title.text
    a = maps.attention[0, 1]
    np.testing.assert_allclose(heat.zmax, np.abs(a[a != 0]).max(), rtol=1e-6)
    if not all(flags):  # the hybrid's full layer: probabilities from 0, as before
        soft = head_figure(maps, flags.index(False), 0).data[0]
        assert soft.zmin == 0 and soft.colorbar.title.text == "p"


def test_the_statistics_leave_the_entropy_of_an_implicit_map_undefined(case):
    maps, flags = case
    implicit = np.array(flags)
    assert np.isnan(maps.entropy[implicit]).all() and np.isfinite(maps.entropy[~implicit]).all()
    assert np.isfinite(maps.distance).all()  # sum of weight x |i - j|: defined for signed rows too
    assert "entropy undefined" in attention_stats(maps).layout.title.text


def test_the_train_tabs_probe_draws_an_implicit_map_signed(case):
    maps, flags = case
    fig = attention_figure(maps.attention, None, None, 3)
    heat = fig.data[0]
    assert heat.zmin == -heat.zmax and heat.zmax == pytest.approx(float(np.nanmax(np.abs(maps.attention[:4, :4]))))
    assert "not probabilities" in fig.layout.title.text
