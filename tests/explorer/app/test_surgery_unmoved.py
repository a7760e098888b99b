"""The Surgery tab's difference view never reads 0% for every head without saying why: the pairs a pattern
allows at the text's length, counted by hand, against the sentence it writes."""

from explorer.app.controls import weights as ui_weights
from explorer.app.controls.fields import config_updates
from explorer.app.tabs.surgery import surgery_outputs, why_unmoved
from models import ModelConfig


def test_why_unmoved_counts_the_pairs_both_patterns_allow():
    full = ModelConfig()
    wide = full.replace(attention="sliding_window", window=64)
    L = 40  # under the window: every causal pair is allowed
    same = why_unmoved(full, wide, L)
    assert "allows exactly the pairs attention='full' allows" in same
    assert f"({L * (L + 1) / 2 / L**2:.1%} of all pairs)" in same and "Long context tab" in same
    narrow = why_unmoved(full, full.replace(attention="sliding_window", window=4), L)
    assert "less than 0.5%" in narrow and "exactly the pairs" not in narrow and "Long context tab" in narrow


def test_the_tab_says_why_a_window_wider_than_the_text_moves_nothing():
    cfg = ModelConfig(attention="sliding_window", window=1000)  # wider than the text: full attention's pairs
    values = {n: u["value"] for n, u in config_updates(cfg).items()}
    text = "a short text of forty-odd bytes, read whole."
    out = surgery_outputs(cfg, text, None, ui_weights.chosen(values, "bundled", None))
    assert "Surgery on" in out["surgery_md"] and "Every head reads 0%" in out["surgery_md"]
    assert "allows exactly the pairs" in out["surgery_md"]
    assert "Every head reads 0%" in out["surgery_diff"].layout.title.text
