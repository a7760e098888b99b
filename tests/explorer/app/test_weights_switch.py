"""The "Weights" control (bundled / initial / your run), through the app's handlers as ``explorer.app.page.layout``
wires them: switching to your run changes the maps, switching back restores them, another session
never sees them, a config that does not match turns the switch back to bundled with a message."""

import json

import plotly.graph_objects as go
import pytest

from explorer.app.controls import weights as ui_trained
from explorer.app.controls.fields import config_updates
from explorer.app.controls.state import new_state
from explorer.app.page.wiring import stage_handler
from explorer.app.tabs import attention as h
from explorer.app.tabs.parts import train_files
from explorer.app.tabs.train import small_config
from explorer.training import checkpoint
from explorer.training.trainer import RunConfig, Trainer
from models import ModelConfig

# the chain's analysis stage as the page runs it: the Gradients, Model and Latency (KV cache) tabs' steps
analysis_stage = stage_handler("analysis")


TEXT = "_CVe<dHi|_CVe<dHi"  # the copy task's probe: 8 symbols, the separator, their copy

attention = ui_trained.attention_with_weights(h.refresh_attention)
analysis = ui_trained.with_weights(analysis_stage)


def values_of(cfg) -> dict:
    return {n: u["value"] for n, u in config_updates(cfg).items()}


@pytest.fixture(scope="module")
def train_state():
    """Session A's Train tab state after a short copy run (what a press of Play leaves in it)."""
    trainer = Trainer(
        small_config(),
        RunConfig(task="copy", steps=60, lr=3e-3, warmup=10, batch_size=16, seq_len=17, every=30, seed=0),
    )
    list(trainer.run())
    return {"trainer": trainer}


def draw(values, state, trained, weights=None):
    """One commit: the attention event, then the analysis event (as the chain runs them); the radio
    reads "your run" while the session holds a record, else ``weights`` (default: bundled)."""
    weights = weights or ("trained" if trained is not None else "bundled")
    out = attention(values, text=TEXT, state=state, trained=trained, weights=weights)
    if isinstance(out["trained"], dict):  # gr.skip(): the session's record is unchanged
        out = {**out, "trained": trained}
    if chosen(out["weights"]) is not None:
        weights = chosen(out["weights"])
    return out, analysis(values, text=TEXT, state=out["state"], trained=out["trained"], weights=weights)


def chosen(radio):
    """The value the attention event sets the Weights radio to (None: kept)."""
    return radio if isinstance(radio, str) else radio.get("value") if isinstance(radio, dict) else None


def plain(markdown: str) -> str:
    return markdown.replace("\\", "")


def fig(f) -> str:
    """The data of a figure a handler sent (a ``go.Figure`` or the JSON of Gradio's ``PlotData``)."""
    data = f.to_plotly_json()["data"] if isinstance(f, go.Figure) else json.loads(f.plot)["data"]
    return json.dumps(data, sort_keys=True, default=str)


def test_switching_to_trained_changes_the_maps_and_back_restores_them(train_state):
    values = values_of(small_config())
    state = new_state()
    initial, initial_grads = draw(values, state, None)
    on = ui_trained.switch(values, "trained", train_state, initial["state"])
    assert on["trained"] is not None and on["trained"].step == 60 and on["state"]["drawn"] is None
    trained, trained_grads = draw(values, on["state"], on["trained"])
    assert fig(trained["grid"]) != fig(initial["grid"])
    assert fig(trained_grads["grad"]) != fig(initial_grads["grad"])
    off = ui_trained.switch(values, "initial", train_state, trained["state"])
    assert off["trained"] is None
    back, back_grads = draw(values, off["state"], off["trained"])
    assert fig(back["grid"]) == fig(initial["grid"]) and fig(back_grads["grad"]) == fig(initial_grads["grad"])


def test_another_session_never_sees_the_trained_weights(train_state):
    values = values_of(small_config())
    mine = ui_trained.switch(values, "trained", train_state, new_state())
    assert mine["trained"] is not None
    other = ui_trained.switch(values, "trained", None, new_state())  # session B has trained nothing
    assert other["weights"] == "bundled" and other["trained"] is None and "No trained model" in other["status"]
    theirs, _ = draw(values, other["state"], other["trained"])
    alone, _ = draw(values, new_state(), None)
    assert fig(theirs["grid"]) == fig(alone["grid"])


def test_a_config_that_does_not_match_turns_the_switch_off(train_state):
    values = values_of(small_config().replace(n_layers=3))
    out = ui_trained.switch(values, "trained", train_state, new_state())
    assert out["weights"] == "bundled" and out["trained"] is None and "n_layers=2" in plain(out["status"])
    # switched on for the right config, then a commit changes the config: the switch turns off
    good = values_of(small_config())
    on = ui_trained.switch(good, "trained", train_state, new_state())
    changed = attention(values, text=TEXT, state=on["state"], trained=on["trained"], weights="trained")
    assert (
        chosen(changed["weights"]) == "bundled"
        and changed["trained"] is None
        and "n_layers=2" in plain(changed["status"])
    )


def test_a_switch_left_on_after_the_snapshot_expired_turns_off():
    values = values_of(small_config())
    out = attention(values, text=TEXT, state=new_state(), trained=None, weights="trained")
    assert chosen(out["weights"]) == "bundled" and out["trained"] is None and "expired" in out["status"]
    assert not isinstance(out["grid"], dict)  # drawn, from the bundled weights (or the initial ones)


def test_a_downloaded_run_uploaded_again_can_be_switched_on(train_state, tmp_path):
    trainer = train_state["trainer"]
    weights_path, _ = checkpoint.save(trainer.model, tmp_path, trainer.cfg, extra={"step": trainer.step})
    uploaded, _, note = train_files.upload(None, str(weights_path))  # a new session's Train tab
    assert "trained for 60 steps" in note
    on = ui_trained.switch(values_of(small_config()), "trained", uploaded, new_state())
    assert on["trained"].step == 60
    assert on["trained"].digest == checkpoint.tensor_digest(trainer.model.state_dict())


def test_the_radio_says_initial_weights_while_no_bundle_serves_the_controls():
    """One source of truth: the line under the radio and the radio's own "bundled" entry agree."""
    served = attention(values_of(ModelConfig()), text=TEXT, state=new_state(), trained=None, weights="bundled")
    assert served["weights"]["choices"][0] == ("bundled (trained)", "bundled") and "value" not in served["weights"]
    unserved_cfg = ModelConfig(d_model=96)  # no bundle was trained at this width, and surgery cannot change it
    out = attention(values_of(unserved_cfg), text=TEXT, state=new_state(), trained=None, weights="bundled")
    assert "initial weights" in plain(out["weights_md"])
    assert out["weights"]["choices"][0] == (ui_trained.NO_BUNDLE_LABEL, "bundled")
    assert "initial weights" in ui_trained.NO_BUNDLE_LABEL
