"""The undo history: appended only when figures were drawn for a new config, bounded, popped by undo."""
import gradio as gr

from explorer.app import history as ui_history
from explorer.app.controls import CONTROL_FIELDS
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
