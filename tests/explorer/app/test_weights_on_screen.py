"""Surgery operates on the weights on screen; another bundle is shown only by an explicit choice: picking
sliding_window keeps the default bundle's tensors (surgery) and offers the bundle trained with it; the
offer, a "Trained: ..." preset and a link carrying one switch by name; any other fill goes back."""

import html

from explorer.analysis.weights import bundled
from explorer.app.controls import weights as ui_weights
from explorer.app.controls.fields import config_updates
from explorer.app.controls.state import new_state
from explorer.app.tabs import attention as h
from explorer.runtime.presets import BUNDLE_PRESETS
from explorer.runtime.text import DEFAULT_TEXT
from models import ModelConfig

SW = bundled.load("sliding_window").config


def plain(md: str) -> str:
    """The line as read: Markdown escapes and HTML entities undone."""
    return html.unescape(md).replace("\\", "")


def values_of(cfg) -> dict:
    return {n: u["value"] for n, u in config_updates(cfg).items()}


def test_picking_the_pattern_of_another_bundle_operates_on_the_weights_on_screen_and_offers_it():
    out = ui_weights.attention_with_weights(h.refresh_attention)(values_of(SW), text=DEFAULT_TEXT, state=new_state())
    assert "bundled model 'default'" in plain(out["weights_md"]) and "surgery" in plain(out["weights_md"])
    assert "A model trained with this pattern exists (bundle 'sliding_window')" in plain(out["weights_md"])
    assert out["weights_show"]["visible"] is True and "show it" in out["weights_show"]["value"]
    as_trained = ui_weights.attention_with_weights(h.refresh_attention)(
        values_of(SW), weights="bundle:sliding_window", text=DEFAULT_TEXT, state=new_state()
    )
    line = plain(as_trained["weights_md"])
    assert "bundled model 'sliding_window'" in line and "surgery" not in line
    assert as_trained["weights_show"]["visible"] is False


def test_show_it_switches_by_name_with_its_preset_for_the_link_and_undo():
    out = ui_weights.show_trained(values_of(SW), "bundled", new_state())
    assert out["weights"]["value"] == "bundle:sliding_window"
    assert ("bundle 'sliding_window' as trained", "bundle:sliding_window") in out["weights"]["choices"]
    assert BUNDLE_PRESETS[out["preset"]] == "sliding_window" and out["state"]["drawn"] is None
    nothing = ui_weights.show_trained(values_of(ModelConfig()), "bundled", new_state())
    assert "stay" in nothing["status"] and nothing["weights_show"]["visible"] is False


def test_a_trained_preset_draws_its_bundle_and_any_other_fill_goes_back_to_bundled():
    filled = {n: {"value": u["value"], "__type__": "update"} for n, u in config_updates(SW).items()}
    out = ui_weights.after_fill({**filled, "preset": "Trained: sliding window"}, "bundled")
    assert out["weights"]["value"] == "bundle:sliding_window"
    back = ui_weights.after_fill({**filled, "preset": "custom"}, "bundle:sliding_window")
    assert back["weights"] == "bundled"
    link = ui_weights.with_trained_preset({**filled, "preset": "Trained: post-LN"})
    assert link["weights"]["value"] == "bundle:post_ln"
    assert "weights" not in ui_weights.with_trained_preset({**filled, "preset": "custom"})
    assert ui_weights.switch(values_of(SW), "bundle:sliding_window", None, new_state())["status"] == ""
