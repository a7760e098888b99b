"""The Train tab trains the model on the controls, at a size the training caps allow.

``fit_to_caps(cfg)`` is the config on the controls with ``max_len``, ``n_layers`` and ``d_model``
scaled down (in that order, halving) until it fits the parameter cap of a model trained on this server
(``MAX_TRAIN_PARAMS``); every other field stays as the controls have it. ``follow(values, synced)``
runs in the first event of every redraw chain (a commit, a preset, a link, reset, undo, the Weights
switch): when the controls describe another config than the one last written into the Train tab
(``synced``), it writes the fitted config into the tab's config box and says in a visible line what
trains and what was scaled down. A config the user typed into the box, or an uploaded model's, stays
until the controls change.

``apply_run(values, record)``: the Weights switch's "your run" when the run's config is the controls'
scaled down: the size controls are set to the run's (what a user who pressed ▶ on the controls'
model expects to see drawn), anything else is a run of another config and is refused as before.
"""

from __future__ import annotations

import json

import gradio as gr

from explorer.analysis.weights import trained as tw
from explorer.app.controls.fields import current_config
from explorer.runtime.configs import app_config
from explorer.runtime.untrusted import shown
from explorer.training.trainer import MAX_TRAIN_PARAMS
from models import ModelConfig

SCALED = ("max_len", "n_layers", "d_model")  # the fields the scale-down may change, first tried first
MIN_SIZE = {"max_len": 256, "n_layers": 1, "d_model": 32}
OUTPUTS = ("train_config", "train_source", "train_synced")


def _smaller(cfg: ModelConfig, field: str):
    """``cfg`` with ``field`` halved (a valid config with fewer parameters), else None."""
    value = getattr(cfg, field)
    if value // 2 < MIN_SIZE[field]:
        return None
    try:
        out = app_config(cfg.replace(**{field: value // 2}))
    except Exception:  # e.g. d_model no longer divisible by n_heads, a window longer than max_len
        return None
    return out if out.approx_params() < cfg.approx_params() else None


def _order(cfg: ModelConfig) -> tuple:
    """The fields to try halving next: ``max_len`` (it counts where positions are learned), then depth or
    width, whichever is further above a 2-layer x 128 model, so the model keeps its proportions."""
    deep_first = cfg.n_layers / 2 >= cfg.d_model / 128
    return ("max_len", "n_layers", "d_model") if deep_first else ("max_len", "d_model", "n_layers")


def fit_to_caps(cfg: ModelConfig) -> tuple:
    """``(config that trains, [(field, controls' value, trained value), ...])``: ``cfg`` itself when it
    fits ``MAX_TRAIN_PARAMS``, else scaled down by halving ``SCALED`` fields (``_order``)."""
    fitted = cfg
    while fitted.approx_params() > MAX_TRAIN_PARAMS:
        smaller = next((s for s in (_smaller(fitted, f) for f in _order(fitted)) if s is not None), None)
        if smaller is None:  # nothing left to halve: Play refuses it with the cap's message
            break
        fitted = smaller
    changes = [(f, getattr(cfg, f), getattr(fitted, f)) for f in SCALED if getattr(cfg, f) != getattr(fitted, f)]
    return fitted, changes


def source_line(fitted: ModelConfig, changes: list) -> str:
    """The visible line: which model trains, and what was scaled down to fit the caps."""
    what = (
        f"{fitted.attention} attention · {fitted.position} · {fitted.norm_placement}-{fitted.norm} · "
        f"{fitted.ffn} · {fitted.n_layers} layers × d_model {fitted.d_model}, ~{fitted.approx_params():,} "
        "parameters"
    )
    line = f"**Trains the model on the controls:** {shown(what)}."
    if changes:
        scaled = ", ".join(f"{f} {a} → {b}" for f, a, b in changes)
        line += (
            f"\n\n⚠️ **Scaled down to the training cap** (≤ {MAX_TRAIN_PARAMS:,} parameters): {scaled}. "
            "Choosing *Weights: your run* sets the controls to this size."
        )
    return line


def initial(cfg: ModelConfig) -> tuple:
    """``(config box JSON, line, synced)`` of the page as it opens with ``cfg`` on the controls."""
    fitted, changes = fit_to_caps(cfg)
    return json.dumps(fitted.to_dict(), indent=1), source_line(fitted, changes), cfg.to_json()


def follow(values: dict, synced=None) -> dict:
    """``{train_config, train_source, train_synced}``: the Train tab's box and line for the config on the
    controls, or skips when it is the one last written (or the controls hold a bad value)."""
    skip = {name: gr.skip() for name in OUTPUTS}
    try:
        cfg = current_config(values)
    except Exception:  # the redraw warns about the bad value itself
        return skip
    if synced == cfg.to_json():
        return skip
    box, line, synced = initial(cfg)
    return {"train_config": box, "train_source": line, "train_synced": synced}


def apply_run(values: dict, record) -> dict | None:
    """``{field: value}`` of the size controls that make the controls' config the run's, when the run's
    config is the controls' scaled down by ``fit_to_caps``; None otherwise."""
    try:
        cfg = current_config(values)
        fitted, changes = fit_to_caps(cfg)
    except Exception:
        return None
    if not changes or tw.mismatch(record, fitted):
        return None
    return {f: b for f, _, b in changes}
