"""The schedule's chips (explorer/app/controls/schedule_chips.py): one per layer, the kinds counted, hostile
values escaped and bounded."""

import re

from explorer.app.controls.schedule_chips import SHOWN, chips_html


def _chips(html: str) -> list:
    return re.findall(r'title="layer (\d+): ([^"]+)">L\1</span>', html)


def test_a_gemma3_schedule_over_eight_layers():
    got = _chips(chips_html("sliding_window*5,full", 8))
    kinds = ["sliding_window"] * 5 + ["full"] + ["sliding_window"] * 2
    assert got == [(str(i), k) for i, k in enumerate(kinds)]
    html = chips_html("sliding_window*5,full", 8)
    assert "sliding_window × 7" in html and "full × 1" in html and "6-layer period cycled over 8 layers" in html


def test_modifiers_and_a_uniform_model():
    got = _chips(chips_html("chunked*3,full:nope:dense", 4))
    assert got[-1] == ("3", "full · NoPE · dense FFN")
    assert chips_html("", 3) == ""  # no schedule: every layer is the Attention choice, no chips


def test_hostile_values_are_escaped_and_bounded():
    bad = chips_html("<script>alert(1)</script>", 4)
    assert "<script>" not in bad and "&lt;script&gt;" in bad and "not a schedule" in bad
    many = chips_html("full", 500)
    assert len(_chips(many)) == SHOWN and f"… {500 - SHOWN} more" in many
    assert chips_html("full", "1e999") == "" and chips_html("full", None) == ""
    assert _chips(chips_html("full", 10**9))[-1][0] == str(SHOWN - 1)
