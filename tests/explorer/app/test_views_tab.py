"""The Variant views tab from its handlers (no server): each view is shown for its variant and
for no other, the tab hides when there is none, the layer / head pickers redraw, and presets bring
their views."""

import json

import gradio as gr
import plotly.graph_objects as go
import pytest

from explorer.analysis import attention_maps
from explorer.app.api.export import cleanup_export, export_files
from explorer.app.controls.fields import config_values
from explorer.app.controls.state import new_state
from explorer.app.tabs import views as ui_views
from explorer.figures.views import PLOT_NAMES
from explorer.runtime.configs import app_config
from explorer.runtime.presets import matching_preset, preset_config
from models import ModelConfig

SMALL = dict(n_layers=2, d_model=32, n_heads=2)
TEXT = "views appear by themselves"

CASES = {
    "standard": (dict(), set()),
    "sliding_window": (dict(attention="sliding_window", window=4), set()),
    "linear": (dict(attention="linear"), {"approximation", "approximation_table"}),
    "performer": (dict(attention="performer"), {"approximation", "approximation_table"}),
    "linformer": (
        dict(attention="linformer", causal=False, position="learned"),
        {"approximation", "approximation_table"},
    ),
    "lsh": (dict(attention="lsh"), {"approximation", "approximation_table", "groups"}),
    "routing": (dict(attention="routing"), {"approximation", "approximation_table", "groups"}),
    "adaptive_span": (dict(attention="adaptive_span"), {"approximation", "approximation_table", "span"}),
    "moe": (dict(ffn="moe"), {"experts"}),
    "hash": (dict(ffn="hash"), {"experts"}),
    "xl": (dict(memory="xl", segment_len=8), {"memory"}),
    "tokens": (dict(memory="tokens"), {"memory"}),
    "early_exit": (dict(layer="early_exit"), {"exit"}),
    "universal_act": (dict(layer="universal", act=True), {"act"}),
    "universal": (dict(layer="universal"), set()),
    "reversible": (dict(layer="reversible"), set()),
    "isab": (dict(attention="isab", causal=False), {"approximation", "approximation_table", "induced"}),
    "luna": (dict(attention="luna", causal=False), {"approximation", "approximation_table", "induced"}),
    "lite": (dict(attention="lite"), {"approximation", "approximation_table", "lite"}),
    "knn_lm": (dict(memory="knn_lm", segment_len=8), {"memory", "retrieval"}),
    "spalm": (dict(memory="spalm", segment_len=8), {"memory", "retrieval"}),
    "feedback": (dict(layer="feedback", max_len=64), {"feedback"}),
    "sandwich": (dict(layer="sandwich"), {"sandwich"}),
    # recurrent mixers: their map is exact (implicit), with no softmax of the same q, k to approximate
    "mamba2": (dict(attention="mamba2", ffn="none", position="none"), set()),
    "gated_deltanet": (dict(attention="gated_deltanet"), set()),
}


def _shown(out):
    return {n for n in PLOT_NAMES if out[f"view_{n}"].get("visible")}


@pytest.mark.parametrize("name", list(CASES))
def test_each_view_appears_for_its_variant_only(name):
    kw, want = CASES[name]
    out = ui_views.refresh_views(config_values(ModelConfig(**SMALL, **kw)), TEXT, 0, 0)
    assert set(out) == set(ui_views.OUTPUTS)
    assert _shown(out) == want
    assert out["views_tab"]["visible"] == bool(want)  # the tab itself
    assert out["views_pick"]["visible"] == ("approximation" in want)  # layer / head pickers
    for n in PLOT_NAMES:
        assert isinstance(out[f"view_{n}"].get("value"), go.Figure) == (n in want)
    if want:
        assert out["views_md"]  # a reading line per view


def test_pickers_follow_the_model_and_redraw_one_head():
    vals = config_values(ModelConfig(attention="linear", **SMALL))
    out = ui_views.refresh_views(vals, TEXT, 5, 9)  # out of range: clamped to the last layer / head
    assert out["views_layer"]["value"] == 1 and out["views_head"]["value"] == 1
    assert [c[1] for c in out["views_layer"]["choices"]] == [0, 1]
    fig = ui_views.redraw_approximation(vals, TEXT, 1, 0)
    assert "layer 1, head 0" in fig.layout.title.text
    std = config_values(ModelConfig(**SMALL))
    assert ui_views.redraw_approximation(std, TEXT, 0, 0) == gr.skip()


def test_bad_config_skips_every_view_output():
    vals = {**config_values(ModelConfig(**SMALL)), "max_len": "not-a-number"}
    out = ui_views.refresh_views(vals, TEXT)
    assert all(x == gr.skip() or (isinstance(x, dict) and len(x) == 1) for x in out.values())
    # nothing new drawn by the attention event: the views are not recomputed either
    good = config_values(ModelConfig(attention="linear", **SMALL))
    assert all(x == gr.skip() for x in ui_views.refresh_views(good, TEXT, 0, 0, new_state()).values())


@pytest.mark.parametrize(
    "preset,view",
    [
        ("Reformer (2020)", "groups"),
        ("Routing Transformer (2021)", "groups"),
        ("Linear Transformer (2020)", "approximation"),
        ("Performer (2021)", "approximation"),
        ("Linformer (2020)", "approximation"),
        ("Nystromformer (2021)", "approximation"),
        ("Transformer-XL (2019)", "memory"),
        ("Compressive Transformer (2019)", "memory"),
        ("Memorizing Transformer (2022)", "memory"),
        ("Switch Transformer (2021)", "experts"),
        ("Universal Transformer (2019)", "act"),
        ("GTrXL (2020)", "memory"),
    ],
)
def test_paper_presets_validate_and_bring_their_view(preset, view):
    cfg = app_config(preset_config(preset))
    assert matching_preset(cfg) == preset
    assert view in attention_maps(cfg, TEXT).views.items


def test_export_adds_the_views_section(tmp_path, monkeypatch):
    import sys
    import zipfile

    monkeypatch.setitem(sys.modules, "kaleido", None)  # PNGs: tests/explorer/export/test_archive.py
    cfg = ModelConfig(ffn="switch", **SMALL)
    out = export_files(config_values(cfg), TEXT, new_state())
    try:
        with zipfile.ZipFile(out["files"]["value"]) as zf:
            html = zf.read("figures.html").decode()
            config = json.loads(zf.read("config.json"))
        assert "Variant views" in html and "expert load per layer" in html and "Plotly.newPlot" in html
        assert config["ffn"] == "switch"
    finally:
        cleanup_export(out["export_dir"])
