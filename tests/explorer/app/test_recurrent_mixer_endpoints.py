"""The app's handlers and API endpoints with the recurrent mixers (``mamba2``, ``gated_deltanet``) and the hybrid
``gated_deltanet*3,full``, called directly as the page and ``gradio_client`` call them: the attention grid draws
their implicit maps signed and says so, ``/analyze`` reads their rows plainly, the Variant views tab has no view
for them (no exact softmax to compare with), the Why endpoints attribute, ablate and patch their heads and the
circuits endpoint refuses them with the reason, and ``/benchmark`` measures them."""

import asyncio
import json

import gradio as gr
import plotly.graph_objects as go
import plotly.io as pio
import pytest

from explorer.app.api import endpoints as ui_api
from explorer.app.controls.fields import config_values
from explorer.app.controls.state import new_state
from explorer.app.tabs import attention as h
from explorer.app.tabs import views as ui_views
from explorer.app.tabs import why
from explorer.figures.attention import IMPLICIT_NOTE
from explorer.figures.views import PLOT_NAMES
from models import ModelConfig

SMALL = dict(n_layers=4, d_model=32, n_heads=2)
CASES = {
    "mamba2": dict(attention="mamba2", ffn="none", position="none"),
    "gated_deltanet": dict(attention="gated_deltanet"),
    "hybrid": dict(attention="full", layer_schedule="gated_deltanet*3,full", position="rope"),
}
TEXT = "abc abc abd abc abc"


def _cfg(name) -> ModelConfig:
    return ModelConfig(**SMALL, **CASES[name]).validate()


def _json(name) -> str:
    return json.dumps(_cfg(name).to_dict())


@pytest.mark.parametrize("name", list(CASES))
def test_the_grid_draws_the_implicit_maps_signed(name):
    out = h.refresh_attention(config_values(_cfg(name)), TEXT, new_state())
    grid = out["grid"] if isinstance(out["grid"], go.Figure) else pio.from_json(out["grid"].plot)
    assert IMPLICIT_NOTE in grid.layout.title.text and grid.layout.coloraxis.cmin == -grid.layout.coloraxis.cmax
    assert "implicit" in grid.layout.coloraxis.colorbar.title.text
    assert "warning" not in json.dumps(out.get("status", "")).lower()


@pytest.mark.parametrize("name", list(CASES))
def test_analyze_reads_the_rows_plainly(name):
    s = ui_api.api_analyze(_json(name), TEXT)
    assert s["row_sums_ok"] and "rows are not distributions" in s["rows"] and s["n_heads"] == 2
    implicit = 3 if name == "hybrid" else 4
    assert sum(row[0] is None for row in s["entropy"]) == implicit  # undefined for signed rows


@pytest.mark.parametrize("name", list(CASES))
def test_the_views_tab_has_no_view_for_them(name):
    out = ui_views.refresh_views(config_values(_cfg(name)), TEXT, 0, 0)
    assert not any(out[f"view_{n}"].get("visible") for n in PLOT_NAMES)
    assert out["views_tab"]["visible"] is False
    assert ui_views.redraw_approximation(config_values(_cfg(name)), TEXT, 0, 0) == gr.skip()


@pytest.mark.parametrize(  # the delta rule's CPU scan makes ablation's and patching's passes slow here
    "name", ["mamba2", *(pytest.param(n, marks=pytest.mark.slow) for n in ("gated_deltanet", "hybrid"))]
)
def test_why_endpoints_take_recurrent_heads(name):
    cfg = _json(name)
    a = why.api_attribution(cfg, TEXT, 9, "x")
    total = sum(map(sum, a["heads"])) + sum(a["ffn"]) + a["embedding"] + a["position_embedding"] + a["biases"]
    assert total == pytest.approx(a["total"], abs=1e-3) == pytest.approx(a["logit"], abs=1e-3)
    assert len(a["heads"]) == 4
    abl = why.api_ablation(cfg, TEXT, "1.0,1.1", "zero")
    assert abl["text"]["after"] != abl["text"]["before"] and abl["heads"] == [[1, 0], [1, 1]]
    lens = why.api_logit_lens(cfg, TEXT)
    assert len(lens["rows"]) == 5
    with pytest.raises(gr.Error, match="recurrent mixer"):
        why.api_circuits(cfg, TEXT)


@pytest.mark.slow  # every Why view of the tab at once (patching: a pass per head)
def test_the_why_tab_draws_and_names_the_circuits_refusal():
    from explorer.analysis import source

    src = source.resolve("bundled", _cfg("gated_deltanet"))
    out = why.draw({}, weights=src, text=TEXT, why_heads=["1.0"], why_bad="abc abc abd axc abc")
    assert isinstance(out["why_attr"], go.Figure) and isinstance(out["why_lens"], go.Figure)
    assert "Circuits" in out["why_md"] and "recurrent mixer" in out["why_md"]
    assert "Attribution:" not in out["why_md"] and "Ablation:" not in out["why_md"]


@pytest.mark.parametrize("name", list(CASES))
def test_benchmark_measures_them(name):
    records = asyncio.run(ui_api.api_benchmark(_json(name), "16,32", "forward_backward"))
    assert [r["status"] for r in records] == ["ok", "ok"]
