"""The "weights: initial / trained" switch: handlers that let the other tabs draw the Train tab's model.

``switch`` snapshots the session's trained model (``explorer.analysis.weights.snapshot``: a bounded
copy, so training on does not change what the tabs show until the switch is pressed again) into
the session's ``trained`` state, or clears it. It turns itself back to "initial" with a message
when there is no trained model or the controls describe another config. ``with_weights(handler)``
hands that record to a compute handler as its ``weights`` argument (the handlers pass it down to the
analyses, which use it only for the config it belongs to); ``attention_with_weights`` also turns the
switch off when a commit changes the config away from the trained one.

The share link and the config export carry the configuration only: the weights never leave the
session except through the Train tab's download.
"""
from __future__ import annotations

import gradio as gr

from explorer.analysis import weights as tw
from explorer.app.controls import current_config
from explorer.app.messages import problem
from explorer.app.state import read_state
from explorer.app.tabs.train import small_config, trained_snapshot
from explorer.runtime.untrusted import shown

INITIAL, TRAINED = "initial", "trained"
SHARE_NOTE = ("The share link and the config export carry the configuration only, never trained weights: "
              "those stay in this browser session (download them from the Train tab).")
SWITCH_OUT = ("weights", "trained", "state", "status")


def train_default(cfg):
    """The Train tab's starting model: the app's config made small enough to learn in a minute
    (``ui_train.small_config``'s size), every other field as the controls have it, so that setting
    the two size controls to the same values lets the other tabs show the trained weights."""
    small = small_config()
    return cfg.replace(n_layers=small.n_layers, d_model=small.d_model)


def _off(state: dict, why: str) -> dict:
    gr.Warning(shown(why))
    return {"weights": INITIAL, "trained": None, "state": state, "status": f"⚠️ **{shown(why)}**"}


def switch(values: dict, weights=INITIAL, train_state=None, state=None) -> dict:
    """-> ``{weights, trained, state, status}``; the state's "drawn" digest is cleared so the chain
    that follows redraws every tab with the chosen weights."""
    state = {**read_state(state), "drawn": None}
    if weights != TRAINED:
        return {"weights": gr.skip(), "trained": None, "state": state, "status": "Showing the initial weights."}
    try:
        cfg = current_config(values)
        record = trained_snapshot(train_state)
    except Exception as exc:  # a bad control value, or weights over the byte cap
        return _off(state, problem(exc))
    if record is None:
        return _off(state, "No trained model in this session yet: train one in the Train tab (or upload one "
                           "there), then switch to trained.")
    diff = tw.mismatch(record, cfg)
    if diff:
        return _off(state, f"The trained weights belong to another config: set {', '.join(diff[:6])} in the "
                           "controls, then switch to trained again.")
    return {"weights": gr.skip(), "trained": record, "state": state,
            "status": f"Showing the weights trained for {record.step} steps (switch again to pick up later steps). "
                      "The gradient figure's other norm placements stay at initialisation."}


def with_weights(handler):
    """``handler(values, **kw)`` called with the session's trained weights (``trained=``) as ``weights``."""
    def run(values: dict, trained=None, **kw):
        return handler(values, weights=trained, **kw)
    return run


def attention_with_weights(handler):
    """Like ``with_weights``; a config that no longer matches the weights, or a switch left on
    ``trained`` after the snapshot expired, turns the switch off (outputs ``weights`` and
    ``trained`` added to the handler's)."""
    def run(values: dict, trained=None, weights=None, **kw):
        keep = {"weights": gr.skip(), "trained": gr.skip()}
        if trained is None and weights == TRAINED:  # the session's snapshot expired (its state's time to live)
            out = handler(values, **kw)
            msg = "Weights switched to initial: this session's trained snapshot expired; switch to trained again."
            return {**out, "weights": INITIAL, "trained": None, "status": f"ℹ️ {shown(msg)}"}
        if trained is not None:
            try:
                diff = tw.mismatch(trained, current_config(values))
            except Exception:
                diff = []  # the handler warns about the bad value itself
            if diff:
                out = handler(values, **kw)
                msg = (f"Weights switched to initial: the trained weights belong to another config "
                       f"({', '.join(diff[:6])}).")
                gr.Info(shown(msg))
                return {**out, "weights": INITIAL, "trained": None, "status": f"ℹ️ {shown(msg)}"}
        return {**handler(values, weights=trained, **kw), **keep}
    return run
