"""A layer schedule (``models.schedule``) travels in a share link like any other field, through the app's
caps and validation; a bad one is dropped and named while the rest of the link is kept."""

from urllib.parse import parse_qsl

from explorer.app.controls.fields import CONTROL_FIELDS, config_values, values_to_config
from explorer.app.controls.share import from_query, to_query
from explorer.runtime.configs import app_config
from models import ModelConfig


def test_schedule_round_trips_through_the_share_link():
    cfg = app_config(
        ModelConfig(layer_schedule="sliding_window*5,full", window=16, n_layers=8, rope_base=1e6, rope_local_base=1e4)
    )
    q = to_query(cfg, "hello")
    params = dict(parse_qsl(q))
    assert params["layer_schedule"] == "sliding_window*5,full" and params["rope_local_base"] == "10000.0"
    got, text, _, notice = from_query(params)
    assert notice is None and got == cfg and text == "hello"
    assert "layer_schedule" not in dict(parse_qsl(to_query(ModelConfig(), "hello")))  # old links stay short


def test_a_bad_schedule_in_a_link_is_named_and_the_rest_kept():
    got, _, _, notice = from_query({"layer_schedule": "sliding_window*5,ful", "window": "16"})
    assert got.layer_schedule == "" and got.window == 16
    assert "layer_schedule" in notice


def test_the_generic_controls_carry_the_new_fields():
    assert {"layer_schedule", "rope_local_base"} <= set(CONTROL_FIELDS)
    values = config_values(ModelConfig(layer_schedule="chunked*3,full:nope", attention_chunk_size=8))
    assert values["rope_local_base"] == 0  # None is shown as 0 in an optional number box
    cfg = values_to_config(values)
    assert cfg.layer_schedule == "chunked*3,full:nope" and cfg.rope_local_base is None
    assert app_config(cfg).layer_config(3).position == "none"
