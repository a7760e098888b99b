"""The schedule's chips (explorer/app/controls/schedule_chips.py): one per layer, the kinds counted, hostile
values escaped and bounded."""

import re

from explorer.app.controls.schedule_chips import SHOWN, chips_html


def _chips(html: str) -> list:
    return re.findall(r'title="layer (\d+): ([^"]+)">L\1</span>', html)


def test_a_gemma3_schedule_over_eight_layers():
    got = _chips(chips_html("sliding_window*5,full", 8, "full"))
    kinds = ["sliding_window"] * 5 + ["full"] + ["sliding_window"] * 2
    assert got == [(str(i), k) for i, k in enumerate(kinds)]
    html = chips_html("sliding_window*5,full", 8, "full")
    assert "sliding_window × 7" in html and "full × 1" in html and "6-layer period cycled over 8 layers" in html


def test_modifiers_and_a_uniform_model():
    got = _chips(chips_html("chunked*3,full:nope:dense", 4, "full"))
    assert got[-1] == ("3", "full · NoPE · dense FFN")
    assert _chips(chips_html("", 3, "linear")) == [("0", "linear"), ("1", "linear"), ("2", "linear")]


def test_hostile_values_are_escaped_and_bounded():
    bad = chips_html("<script>alert(1)</script>", 4, "full")
    assert "<script>" not in bad and "&lt;script&gt;" in bad and "not a schedule" in bad
    assert "<img" not in chips_html("", 2, '<img src=x onerror="alert(1)">')
    many = chips_html("full", 500, "full")
    assert len(_chips(many)) == SHOWN and f"… {500 - SHOWN} more" in many
    assert chips_html("", "1e999", "full") == "" and chips_html("", None, "full") == ""
    assert _chips(chips_html("", 10**9, "full"))[-1][0] == str(SHOWN - 1)
