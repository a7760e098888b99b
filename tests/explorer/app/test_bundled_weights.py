"""The page and the API draw the bundled trained model by default, move it by surgery, and say so.

References: the bundle's own manifest (the weights line names it), the initial weights (a different
model), the surgery properties (a window as wide as the text changes nothing, a window of one token
destroys the model), and ConfigError naming the field for a bad ``weights`` value.
"""

import json

import gradio as gr
import plotly.graph_objects as go
import pytest

from explorer.app.api import endpoints as api
from explorer.app.controls import weights as ui_weights
from explorer.app.controls.fields import config_updates
from explorer.app.controls.state import new_state
from explorer.app.tabs import attention as h
from explorer.app.tabs.surgery import surgery_outputs
from explorer.runtime.text import DEFAULT_TEXT
from models import ModelConfig

attention = ui_weights.attention_with_weights(h.refresh_attention)


def values_of(cfg) -> dict:
    return {n: u["value"] for n, u in config_updates(cfg).items()}


def grid_data(out) -> str:
    f = out["grid"]
    data = f.to_plotly_json()["data"] if isinstance(f, go.Figure) else json.loads(f.plot)["data"]
    return json.dumps(data, sort_keys=True, default=str)


def draw(cfg, weights):
    return attention(values_of(cfg), text=DEFAULT_TEXT, state=new_state(), trained=None, weights=weights)


def test_the_default_config_draws_the_bundled_model_and_says_where_it_came_from():
    bundled = draw(ModelConfig(), "bundled")
    initial = draw(ModelConfig(), "initial")
    assert "bundled model" in bundled["weights_md"] and "default" in bundled["weights_md"]
    assert "steps" in bundled["weights_md"] and "held" in bundled["weights_md"]
    assert "initial weights" in initial["weights_md"]
    assert grid_data(bundled) != grid_data(initial)


def test_a_surgery_change_keeps_the_weights_and_reports_the_loss():
    out = draw(ModelConfig(attention="sliding_window", window=8, n_sinks=4), "bundled")
    md = out["weights_md"].replace("\\", "")
    assert "moved to" in md and "Surgery: held-out loss" in md and "nats/byte" in md


def test_a_config_no_bundle_serves_says_why_and_offers_training():
    out = draw(ModelConfig(d_model=96), "bundled")
    md = out["weights_md"].replace("\\", "")
    assert "No bundled model serves this config" in md and "d_model=96" in md and "Train tab" in md


def test_the_surgery_tab_for_a_change_a_bundle_and_no_bundle():
    cfg = ModelConfig(attention="sliding_window", window=8, n_sinks=4)
    weights = ui_weights.chosen(values_of(cfg), "bundled", None)
    moved = surgery_outputs(cfg, DEFAULT_TEXT, None, weights)
    assert "Surgery on bundle" in moved["surgery_md"] and "nats/byte" in moved["surgery_md"]
    diff = moved["surgery_diff"].to_plotly_json()
    assert diff["data"] and all(d["type"] == "heatmap" for d in diff["data"])
    assert (
        moved["surgery_table"].to_plotly_json()["data"]
        and "L = 128 tokens (trained length) | L = 512 tokens (4x past the trained length)" in moved["surgery_table_md"]
    )
    own = surgery_outputs(
        ModelConfig(), DEFAULT_TEXT, None, ui_weights.chosen(values_of(ModelConfig()), "bundled", None)
    )
    assert "as trained" in own["surgery_md"]
    none = surgery_outputs(ModelConfig(d_model=96), DEFAULT_TEXT, None, None)
    assert "No surgery here" in none["surgery_md"]


def test_api_weights_choice_and_report():
    cfg = json.dumps({"attention": "full"})
    trained = api.api_analyze(cfg, DEFAULT_TEXT)
    initial = api.api_analyze(cfg, DEFAULT_TEXT, weights="initial")
    assert trained["weights"]["used"] == "bundled" and trained["weights"]["step"] > 0
    assert initial["weights"]["used"] == "initial"
    assert trained["entropy"] != initial["entropy"]
    moved = api.api_analyze(json.dumps({"attention": "strided", "stride": 8}), DEFAULT_TEXT)
    assert moved["weights"]["used"] == "bundled" and "attention" in moved["weights"]["surgery"]
    none = api.api_analyze(json.dumps({"d_model": 96}), DEFAULT_TEXT)
    assert none["weights"]["used"] == "initial" and "d_model=96" in none["weights"]["source"]
    grads = api.api_gradients(cfg)
    assert grads["weights"]["used"] == "bundled"
    assert grads["residual"] != api.api_gradients(cfg, weights="initial")["residual"]  # another model's gradients


@pytest.mark.parametrize("bad", ["trained", "../x", 3])
def test_api_refuses_an_unknown_weights_value_by_name(bad):
    with pytest.raises(gr.Error, match="weights"):
        api.api_analyze(json.dumps({}), DEFAULT_TEXT, weights=bad)


def test_a_config_that_needs_other_weights_is_offered_the_train_tab():
    from explorer.app.tabs.surgery import to_train_tab

    out = to_train_tab(values_of(ModelConfig(ffn="swiglu")))
    assert json.loads(out["train_config"])["ffn"] == "swiglu" and out["train_task"] == "lm"
    assert "needs other weights" in out["status"] and "min here" in out["status"]
    bad = to_train_tab({**values_of(ModelConfig()), "n_heads": 3})
    assert "n\\_heads" in bad["status"] or "n_heads" in bad["status"]
