"""The encoder-decoder's extra grids: token labels on their outer panels, and the zoom into one of
their heads (``explorer.app.tabs.parts.stack_zoom``) checked against the maps it draws from."""

import warnings

import numpy as np
import pytest

from explorer.analysis import attention_maps
from explorer.app.controls.fields import CONTROL_FIELDS
from explorer.app.tabs.parts.stack_zoom import parse_pick, refresh_stack_zoom
from explorer.app.tabs.parts.stacks import FIGURES, attention_updates, slot_maps
from explorer.figures.stacks import extra_grid, map_title
from models import ConfigError, ModelConfig

SMALL = dict(
    architecture="encoder_decoder", n_layers=2, n_encoder_layers=1, n_decoder_layers=2, d_model=32, n_heads=2, d_ff=64
)
TEXT = "abcde=>vwxyz!"


@pytest.fixture(scope="module")
def slots():
    return slot_maps(attention_maps(ModelConfig(**SMALL), TEXT, separator="=>"))


def _values():
    cfg = ModelConfig(**SMALL)
    return {name: getattr(cfg, name) for name in CONTROL_FIELDS}


def test_extra_grid_labels_outer_panels_and_tags_each_panel(slots):
    cross = slots["cross_grid"]
    fig = extra_grid(cross)
    n_l, n_h = cross.attention.shape[:2]
    assert [list(t.meta) for t in fig.data] == [[l, h] for l in range(n_l) for h in range(n_h)]
    for k, trace in enumerate(fig.data):
        layer, head = divmod(k, n_h)
        s = "" if k == 0 else str(k + 1)
        assert fig.layout[f"xaxis{s}"].showticklabels == (layer == n_l - 1)  # bottom row: source tokens
        assert fig.layout[f"yaxis{s}"].showticklabels == (head == 0)  # first column: target tokens
        assert list(trace.x) == [f"{j} {c}" for j, c in enumerate("abcde")]
        assert list(trace.y) == [f"{i} {c}" for i, c in enumerate("vwxyz!")]


def test_parse_pick_refuses_anything_but_a_grid_and_two_numbers():
    assert parse_pick("cross-grid 1 0") == ("cross_grid", 1, 0)
    assert parse_pick(" encoder-grid 0 1 ") == ("encoder_grid", 0, 1)
    for bad in (
        None,
        "",
        "cross-grid 1",
        "grid 0 0",
        "cross-grid -1 0",
        "cross-grid 1e3 0",
        "cross-grid 0 0 0",
        "cross-grid 99999 0",
        "<script> 0 0",
    ):
        with pytest.raises(ConfigError, match="stack_pick"):
            parse_pick(bad)


@pytest.mark.parametrize("grid,slot", [("cross-grid", "cross_grid"), ("encoder-grid", "encoder_grid")])
def test_zoom_draws_the_picked_head_with_every_token(slots, grid, slot):
    maps = slots[slot]
    layer, head = maps.attention.shape[0] - 1, maps.attention.shape[1] - 1
    out = refresh_stack_zoom(_values(), TEXT, f"{grid} {layer} {head}", separator="=>")
    update = out["stack_zoom"]
    fig = update["value"]
    assert update["visible"] is True
    assert fig.layout.title.text.startswith(f"Layer {layer}, head {head}: {map_title(maps)}")
    expected = maps.attention[layer, head].astype(np.float64)
    z = np.asarray(fig.data[0].z, dtype=np.float64)
    np.testing.assert_allclose(np.nan_to_num(z), expected, rtol=1e-6, atol=1e-7)
    assert list(fig.data[0].x) == [f"{j} {c}" for j, c in enumerate("abcde")]  # source keys: no memory offset
    queries = "vwxyz!" if slot == "cross_grid" else "abcde"
    assert list(fig.data[0].y) == [f"{i} {c}" for i, c in enumerate(queries)]
    if slot == "cross_grid":
        assert "(source)" in fig.layout.xaxis.title.text and "(target)" in fig.layout.yaxis.title.text


def test_a_bad_pick_warns_and_draws_nothing():
    for pick in ("cross-grid 9 0", "grid 0 0", "cross-grid 0 9"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = refresh_stack_zoom(_values(), TEXT, pick, separator="=>")
        assert out["stack_zoom"] == {"__type__": "update"}  # gr.skip(): the last zoom stays
        assert any("stack_pick" in str(w.message) for w in caught), pick


def test_the_zoom_is_hidden_whenever_the_grids_are_redrawn():
    assert "stack_zoom" in FIGURES
    out = attention_updates(ModelConfig(**SMALL), TEXT, "=>")
    assert out["stack_zoom"]["visible"] is False and out["cross_grid"]["visible"] is True
    out = attention_updates(ModelConfig(), TEXT, "=>")  # a single stack: every extra figure hidden
    assert all(out[k]["visible"] is False for k in FIGURES)
