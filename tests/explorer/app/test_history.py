"""The undo history: appended only when figures were drawn for a new config, bounded, popped by undo."""

import gradio as gr

from explorer.app.controls import history as ui_history
from explorer.app.controls.fields import CONTROL_FIELDS
from models import ModelConfig


def _values(cfg):
    d = cfg.to_dict()
    return {k: d[k] for k in CONTROL_FIELDS if k in d}


def test_record_and_undo():
    a, b = ModelConfig(), ModelConfig(attention="strided")
    h = ui_history.record(_values(b), {"grid": gr.skip()}, [a.to_dict()])
    assert h == [a.to_dict()]  # nothing drawn: nothing recorded
    h = ui_history.record(_values(b), {"grid": object()}, h)
    assert h == [a.to_dict(), b.to_dict()]
    assert ui_history.record(_values(b), {"grid": object()}, h) == h  # same config twice: one entry
    out = ui_history.undo(h)
    assert out["history"] == [a.to_dict()] and out["attention"]["value"] == "full"
    assert ui_history.undo(out["history"])["status"] == "Nothing to undo."
    many = [ModelConfig(n_layers=1 + k % 2, seed=k).to_dict() for k in range(30)]
    assert len(ui_history.record(_values(b), {"grid": object()}, many)) == ui_history.MAX_HISTORY


def test_undo_right_after_reset_restores_the_config_before_the_reset():
    """Reset fills the defaults at once; its redraw records them later. An Undo pressed in between must
    bring back the configuration the figures showed before the reset, not the one before that."""
    w, x = ModelConfig(attention="strided"), ModelConfig(attention="sliding_window", window=8)
    history = [w.to_dict(), x.to_dict()]  # x is drawn; Reset then put the defaults in the controls
    out = ui_history.undo(history, _values(ModelConfig()))
    assert out["attention"]["value"] == "sliding_window" and out["window"]["value"] == 8
    assert out["history"] == history  # x stays the newest entry: the page is going back to it
    # once the reset's redraw has recorded the defaults, Undo pops them as usual
    recorded = ui_history.record(_values(ModelConfig()), {"grid": object()}, history)
    out = ui_history.undo(recorded, _values(ModelConfig()))
    assert out["attention"]["value"] == "sliding_window" and out["history"] == history


def test_the_address_bar_is_read_again_on_back_and_forward():
    """Back to an address without a query: the defaults; with one: the link's config, as on load."""
    from types import SimpleNamespace

    from explorer.app.controls.fields import CONTROL_FIELDS
    from explorer.app.controls.history import from_address

    plain = from_address(SimpleNamespace(query_params={}))
    assert plain["attention"]["value"] == "full" and plain["preset"] == "(custom)"
    assert from_address(SimpleNamespace(query_params={"__theme": "dark"}))["attention"]["value"] == "full"
    linked = from_address(SimpleNamespace(query_params={"attention": "sliding_window", "window": "16"}))
    assert linked["attention"]["value"] == "sliding_window" and linked["window"]["value"] == 16
    assert set(CONTROL_FIELDS) <= set(linked)
