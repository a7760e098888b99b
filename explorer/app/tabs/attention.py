"""Event handlers of the app: control values in, figures and text out, everything keyed by name.

A handler takes ``values`` (``{ModelConfig field: control value}``) and named arguments, and
returns ``{output name: value}`` (``explorer.app.layout`` maps names to components, so no handler depends
on the order of a component list). Every handler catches ``ConfigError`` (and, logged, any other
exception): it shows a warning that names the problem, escaped and truncated (``ui_text.shown``),
and returns ``gr.skip()`` for the figures, so the last good figures stay on screen and no traceback
ever reaches the page.

Per-session state (``gr.State``) is deliberately tiny: a digest of what the figures show (so a
commit that changes nothing redraws nothing), a digest of the controls' visibility (so unchanged
controls are not re-sent, which would store a copy of each in Gradio's session), and the last
sweep's records for the export. The text, the config and the figures are never kept in it.
"""
from __future__ import annotations

import functools
import json

import gradio as gr
from gradio.components.plot import PlotData

from explorer.analysis import experiments as ex
from explorer.analysis import figure_memo as drawn
from explorer.app import seq2seq as ui_encdec
from explorer.app.grid_pick import FIELDS, normalise, parse_pick, with_grid
from explorer.app.share import to_query
from explorer.figures import readings as report
from explorer.runtime.limits import MAX_TEXT_BYTES
from explorer.runtime.presets import matching_preset
from models import ModelConfig
from explorer.figures.attention import attention_grid, attention_stats
from explorer.app.controls import adjust_causal
from explorer.app.messages import as_text
from explorer.app.controls import control_outputs
from explorer.app.controls import current_config
from explorer.app.state import drawn_digest
from explorer.app.messages import problem
from explorer.app.state import read_state
from explorer.app.messages import text_notice
from explorer.app.messages import warn


FIGURES = ("grid", "stats", "maps_md", *ui_encdec.FIGURES)


# ---------------------------------------------------------------------------- live refresh
def grid_figure(maps, grid_layers=None, grid_heads=None, strict: bool = False):
    """The attention grid of the picked layers and heads (``explorer.app.grid_pick``; ConfigError if
    malformed, or with ``strict`` out of range; otherwise indices the config lacks are dropped and
    the title says what is shown)."""
    n_l, n_h = maps.attention.shape[:2]
    return attention_grid(maps, parse_pick(grid_layers, n_l, FIELDS["grid_layers"], strict),
                                parse_pick(grid_heads, n_h, FIELDS["grid_heads"], strict))


def attention_outputs(cfg: ModelConfig, text: str, separator=None, grid_layers=None, grid_heads=None) -> tuple:
    maps = ex.attention_maps(cfg, text, separator=ui_encdec.separator(separator))
    summary = maps.summary()
    return (grid_figure(maps, grid_layers, grid_heads), attention_stats(maps),
            report.maps_reading(summary, MAX_TEXT_BYTES))


def refresh_attention(values: dict, text, state, keep_status: bool = False, separator=None, grid_layers=None,
                      grid_heads=None, stats: bool = True) -> dict:
    """-> grid, stats, maps_md, status, share_qs, preset, state and every control's update.

    Incompatible causal settings are adjusted (and said); a commit that leaves the config and the
    used text unchanged redraws nothing; the grid shows the picked ``grid_layers`` / ``grid_heads``
    (carried in the share link). ``keep_status``: after a preset / link / upload filled the
    controls, leave its status line unless there is something new to say. ``stats=False``: the
    statistics figure is left to ``refresh_stats`` (the app sends the grid first, the rest follows)."""
    out = _refresh_attention(values, text, state, separator, (grid_layers, grid_heads), stats)
    # the separator box is shown for an encoder-decoder whatever happened (a missing separator is the
    # error the user must be able to fix)
    seq2seq = values.get("architecture") == "encoder_decoder"
    out["separator"] = gr.update(visible=seq2seq)
    out["sweep_axis"] = gr.update(visible=seq2seq)
    if keep_status and out.get("status") == "":
        out["status"] = gr.skip()
    return out


def _refresh_attention(values: dict, text, state, separator=None, picks=(None, None), with_stats: bool = True) -> dict:
    state = read_state(state)
    text = as_text(text)
    values, note = adjust_causal(dict(values))
    controls, sig = control_outputs(values, state)
    if note:
        controls["causal"] = gr.update(value=values["causal"])
    try:
        cfg = current_config(values)
        drawn = drawn_digest(cfg, text, separator, picks)
        if drawn == state["drawn"]:
            return {**controls, **{k: gr.skip() for k in FIGURES}, "status": note or text_notice(text),
                    "share_qs": gr.skip(), "preset": gr.skip(), "state": {**state, "fresh": False, "ui": sig}}
        if with_stats:
            grid, stats, reading = attention_outputs(cfg, text, separator, *picks)
        else:  # the grid as it is sent, memoised: a config (and pick) drawn before costs no Plotly work
            maps = ex.attention_maps(cfg, text, separator=ui_encdec.separator(separator))
            grid, stats = _grid_plot(cfg, text, separator, picks), gr.skip()
            reading = report.maps_reading(maps.summary(), MAX_TEXT_BYTES)
        extra = ui_encdec.attention_updates(cfg, text, separator)
    except Exception as exc:  # ConfigError and anything else: warn, keep the last good figures
        return {**controls, **{k: gr.skip() for k in FIGURES}, "status": warn(problem(exc)),
                "share_qs": gr.skip(), "preset": gr.skip(), "state": {**state, "fresh": False, "ui": sig}}
    matched = _matching_preset(cfg.to_json())
    return {**controls, **extra, "grid": grid, "stats": stats, "maps_md": reading, "status": note or text_notice(text),
            "share_qs": with_grid(to_query(cfg, text, matched, ui_encdec.separator(separator)), *picks), "preset": matched,
            "state": {**state, "drawn": drawn, "fresh": True, "ui": sig}}


def refresh_stats(values: dict, text, state=None, separator=None) -> dict:
    """-> the pattern and per-head statistics figure, after ``refresh_attention(stats=False)``;
    skipped when that event drew nothing new or the config is bad (it already warned)."""
    if state is not None and not read_state(state)["fresh"]:
        return {"stats": gr.skip()}
    try:
        return {"stats": _plot("stats", attention_stats, current_config(values), as_text(text), separator)}
    except Exception as exc:
        problem(exc)
        return {"stats": gr.skip()}


def _plot(name: str, make, cfg: ModelConfig, text: str, separator) -> PlotData:
    """``make(maps)`` as Gradio's Plot sends it, memoised beside the maps (``explorer.analysis.figure_memo``)."""
    return PlotData(type="plotly", plot=drawn.figure_json(name, make, cfg, text, ui_encdec.separator(separator)))


def _grid_plot(cfg: ModelConfig, text: str, separator, picks) -> PlotData:
    """The attention grid of the picked layers / heads, memoised per pick like ``_plot``."""
    layers, heads = picks
    name = f"grid:{normalise(layers)}:{normalise(heads)}"
    return _plot(name, lambda maps: grid_figure(maps, layers, heads), cfg, text, separator)


@functools.lru_cache(maxsize=256)
def _matching_preset(cfg_json: str) -> str:
    """``presets.matching_preset``, memoised by config (it builds every preset's config per call)."""
    return matching_preset(ModelConfig.from_dict(json.loads(cfg_json)))


