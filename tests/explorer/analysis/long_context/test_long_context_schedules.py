"""The long-context view's window change on a layer schedule and on a mechanism a window cannot read
(explorer/analysis/long_context/view.py, models.schedule.with_attention)."""

import pytest

from explorer.analysis import source
from explorer.analysis.long_context import view as lc
from models import ModelConfig
from models.schedule import parse, with_attention

L = 256


@pytest.mark.parametrize(
    "text, keys, want",
    [
        (
            "chunked*3,full:nope",
            {"chunked": "sliding_window", "full": "sliding_window"},
            "sliding_window*3,sliding_window:nope",
        ),
        ("sliding_window,full", {"full": "sliding_window"}, ""),
        ("mla:dense,mla*3", {"mla": "full"}, "full:dense,full*3"),
        ("full,sliding_window*2,full", {}, "full,sliding_window*2,full"),
    ],
)
def test_with_attention_maps_keys_and_keeps_modifiers(text, keys, want):
    assert with_attention(text, keys) == want
    if want:  # one period, layer by layer: each key mapped, its modifiers kept
        got = [(k.attention, k.nope, k.dense) for k in parse(want)]
        assert got == [(keys.get(k.attention, k.attention), k.nope, k.dense) for k in parse(text)]


def _view(monkeypatch, cfg):
    monkeypatch.setattr(lc, "LENGTHS", (L, *lc.LENGTHS))
    return lc.long_context(source.resolve("initial", cfg), L, "heldout", change="window")


def test_a_schedule_is_windowed_layer_by_layer_keeping_its_nope_layer(monkeypatch):
    cfg = ModelConfig(
        attention="chunked", layer_schedule="chunked*3,full:nope", attention_chunk_size=32, n_layers=4, max_len=L
    ).validate()
    view = _view(monkeypatch, cfg)
    assert len(view.sides) == 2, view.notes
    changed = view.sides[1].config
    assert changed.layer_schedule == "sliding_window*3,sliding_window:nope" and changed.window == lc.WINDOW


def test_a_mechanism_a_window_cannot_read_draws_the_model_alone_and_says_why(monkeypatch):
    cfg = ModelConfig(attention="mla", n_layers=2, max_len=L).validate()
    view = _view(monkeypatch, cfg)
    assert len(view.sides) == 1
    assert any("cannot keep this model's weights" in n and "one model drawn" in n for n in view.notes)
