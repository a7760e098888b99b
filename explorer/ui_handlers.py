"""Event handlers of the app: control values in, figures and text out, everything keyed by name.

A handler takes ``values`` (``{ModelConfig field: control value}``) and named arguments, and
returns ``{output name: value}`` (``explorer.ui`` maps names to components, so no handler depends
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
import hashlib
import json
import logging
import os

import gradio as gr
from gradio.components.plot import PlotData

from models import ConfigError, ModelConfig, registries
from models.config import CATEGORIES

from . import experiments as ex
from . import drawn, plots, report, ui_encdec
from .grid_pick import FIELDS, grid_from_params, normalise, parse_pick, with_grid
from .limits import MAX_TEXT_BYTES, check_limits
from .presets import CUSTOM, matching_preset, preset_config
from .share import clip_text, from_query, link_separator, to_query
from .ui_controls import CONTROL_FIELDS, config_updates, values_to_config, visibility_updates
from .ui_text import load_json, shown, shown_html, truncate

log = logging.getLogger(__name__)

KV_LENGTHS = [2 ** k for k in range(7, 18)]
MAX_UPLOAD_BYTES = 100_000
FIGURES = ("grid", "stats", "maps_md", *ui_encdec.FIGURES)


def new_state(cfg: ModelConfig | None = None, text: str | None = None) -> dict:
    """``{"drawn": digest of the figures' config and text, "fresh": drawn by the last edit,
    "ui": digest of the controls' visibility, "sweep": last sweep records}``; ``text`` given: the
    page was built showing ``cfg``'s figures for it."""
    cfg = cfg or ModelConfig()
    drawn = None if text is None else _drawn(cfg, text)
    return {"drawn": drawn, "fresh": False, "ui": _ui_digest(cfg.to_json()), "sweep": None}


@functools.lru_cache(maxsize=64)
def _ui_digest(cfg_json: str) -> str:
    """Digest of the controls' look for a config (memoised: every handler reading a state needs the default's)."""
    return _digest(_control_ui(ModelConfig.from_dict(json.loads(cfg_json)).to_dict())[1])


def _state(state) -> dict:
    return {**new_state(), **state} if isinstance(state, dict) else new_state()


def _drawn(cfg: ModelConfig, text: str, separator=None, picks=(None, None)) -> str:
    """Digest of what the attention figures show: config, used text, separator, grid picks."""
    return _digest([cfg.to_json(), clip_text(text), ui_encdec.separator(separator), *map(normalise, picks)])


def _digest(obj) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _problem(exc: Exception) -> str:
    """The message for a failed request, truncated: the ConfigError itself, or a generic line (logged)."""
    if isinstance(exc, ConfigError):
        return truncate(str(exc))
    log.exception("handler failed")
    return truncate(f"Could not compute this configuration ({type(exc).__name__}: {str(exc)[:200]}).")


def _warn(msg: str) -> str:
    """Toast + status line; ``msg`` may echo a hostile value, so both are escaped."""
    gr.Warning(shown_html(msg))
    return f"⚠️ **{shown(msg)}** The figures show the last valid configuration."


def text_notice(text: str) -> str:
    n = len(str(text).encode("utf-8"))
    if n > MAX_TEXT_BYTES:
        return (f"ℹ️ The text is {n:,} bytes; the first {MAX_TEXT_BYTES} are used (one token per byte) "
                "and only those go into the share link.")
    return ""


def current_config(values: dict) -> ModelConfig:
    return check_limits(values_to_config(values))


def _text(text) -> str:
    return text if isinstance(text, str) else ("" if text is None else str(text))


# ---------------------------------------------------------------------------- controls
def choice_marks(values: dict) -> dict:
    """``{category: [(label, key), ...]}``: keys that cannot run with the current causal setting are
    labelled (``linformer (needs causal off)``), so the list shows it before a choice is made."""
    try:
        cfg = values_to_config({k: v for k, v in values.items() if k in CONTROL_FIELDS})
    except Exception:
        return {c: [(k, k) for k in registries()[c]] for c in CATEGORIES}
    return {c: list(items) for c, items in _marks(cfg.to_json()).items()}


@functools.lru_cache(maxsize=256)
def _marks(cfg_json: str) -> dict:
    """``choice_marks`` of one config, memoised (a pure function of it; ~0.1 s of validation per call)."""
    cfg = ModelConfig.from_dict(json.loads(cfg_json))
    out = {}
    for cat in CATEGORIES:
        items = []
        for key in registries()[cat]:
            label = key
            try:
                cfg.replace(**{cat: key}).validate()
            except ConfigError as e:
                if e.field == "causal":
                    label = f"{key} (needs causal {'off' if cfg.causal else 'on'})"
            except Exception:
                pass
            items.append((label, key))
        out[cat] = items
    return out


def _control_ui(values: dict) -> tuple:
    """(``{field: gr.update}`` of visibility, notes and marked choices; the plain data they show)."""
    vis = visibility_updates(values)
    marks = choice_marks(values)
    for cat, items in marks.items():
        vis[cat] = {**vis[cat], "choices": items}
    plain = {n: [u.get("visible"), u.get("info"), u.get("choices")] for n, u in vis.items()}
    return vis, plain


def control_outputs(values: dict, state: dict) -> tuple:
    """Control updates only when they differ from what the page shows (``state["ui"]``)."""
    ups, plain = _control_ui(values)
    sig = _digest(plain)
    if sig == state.get("ui"):
        return {n: gr.skip() for n in CONTROL_FIELDS}, sig
    return ups, sig


def adjust_causal(values: dict) -> tuple:
    """When the only problem is ``causal`` (linformer / Nystromformer are bidirectional only,
    adaptive span causal only), flip it -> (values, note); otherwise the values unchanged."""
    try:
        values_to_config(values).validate()
        return values, ""
    except ConfigError as e:
        if e.field != "causal":
            return values, ""
    flipped = {**values, "causal": not values.get("causal", True)}
    try:
        values_to_config(flipped).validate()
    except Exception:
        return values, ""
    state = "ticked" if flipped["causal"] else "unticked"
    why = "it is causal only" if flipped["causal"] else "it attends in both directions"
    who = next((f"{values[c]}" for c in ("attention", "position") if values.get(c) is not None), "this choice")
    return flipped, f"ℹ️ Causal {state}: {who} cannot run otherwise ({why})."


# ---------------------------------------------------------------------------- live refresh
def grid_figure(maps, grid_layers=None, grid_heads=None, strict: bool = False):
    """The attention grid of the picked layers and heads (``explorer.grid_pick``; ConfigError if
    malformed, or with ``strict`` out of range; otherwise indices the config lacks are dropped and
    the title says what is shown)."""
    n_l, n_h = maps.attention.shape[:2]
    return plots.attention_grid(maps, parse_pick(grid_layers, n_l, FIELDS["grid_layers"], strict),
                                parse_pick(grid_heads, n_h, FIELDS["grid_heads"], strict))


def attention_outputs(cfg: ModelConfig, text: str, separator=None, grid_layers=None, grid_heads=None) -> tuple:
    maps = ex.attention_maps(cfg, text, separator=ui_encdec.separator(separator))
    summary = maps.summary()
    return (grid_figure(maps, grid_layers, grid_heads), plots.attention_stats(maps),
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
    state = _state(state)
    text = _text(text)
    values, note = adjust_causal(dict(values))
    controls, sig = control_outputs(values, state)
    if note:
        controls["causal"] = gr.update(value=values["causal"])
    try:
        cfg = current_config(values)
        drawn = _drawn(cfg, text, separator, picks)
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
        return {**controls, **{k: gr.skip() for k in FIGURES}, "status": _warn(_problem(exc)),
                "share_qs": gr.skip(), "preset": gr.skip(), "state": {**state, "fresh": False, "ui": sig}}
    matched = _matching_preset(cfg.to_json())
    return {**controls, **extra, "grid": grid, "stats": stats, "maps_md": reading, "status": note or text_notice(text),
            "share_qs": with_grid(to_query(cfg, text, matched, ui_encdec.separator(separator)), *picks), "preset": matched,
            "state": {**state, "drawn": drawn, "fresh": True, "ui": sig}}


def refresh_stats(values: dict, text, state=None, separator=None) -> dict:
    """-> the pattern and per-head statistics figure, after ``refresh_attention(stats=False)``;
    skipped when that event drew nothing new or the config is bad (it already warned)."""
    if state is not None and not _state(state)["fresh"]:
        return {"stats": gr.skip()}
    try:
        return {"stats": _plot("stats", plots.attention_stats, current_config(values), _text(text), separator)}
    except Exception as exc:
        _problem(exc)
        return {"stats": gr.skip()}


def _plot(name: str, make, cfg: ModelConfig, text: str, separator) -> PlotData:
    """``make(maps)`` as Gradio's Plot sends it, memoised beside the maps (``explorer.drawn``)."""
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


def placement_results(cfg: ModelConfig) -> tuple:
    """Gradient norms of ``cfg`` under every registered norm placement -> (results, skipped)."""
    results, skipped = {}, {}
    for placement in registries()["norm_placement"]:
        try:
            results[placement] = ex.gradient_norms(cfg.replace(norm_placement=placement))
        except ConfigError as exc:
            skipped[placement] = str(exc)
    return results, skipped


ANALYSIS = ("grad", "grad_md", "model_md", "kv", "config_code", *ui_encdec.ANALYSIS)


def analysis_outputs(cfg: ModelConfig, text: str) -> dict:
    results, skipped = placement_results(cfg)
    grad_fig = plots.gradient_figure(results, cfg.norm_placement)
    reading = report.gradient_reading(results, cfg.norm_placement, skipped)
    seq = max(1, min(len(_text(text).encode("utf-8")), MAX_TEXT_BYTES))
    summary = ex.model_summary(cfg, seq_len=seq)
    kv = plots.kv_cache_figure(ex.kv_cache_bytes(cfg, KV_LENGTHS))
    return {"grad": grad_fig, "grad_md": reading, "model_md": report.model_markdown(summary), "kv": kv,
            "config_code": json.dumps(cfg.to_dict(), indent=2), **ui_encdec.analysis_updates(cfg)}


def refresh_analysis(values: dict, text, state=None) -> dict:
    """-> gradient figure, reading, model card, KV figure, config JSON; skipped when the attention
    event drew nothing new or the config is bad (the attention handler already warned)."""
    if state is not None and not _state(state)["fresh"]:
        return {k: gr.skip() for k in ANALYSIS}
    try:
        return analysis_outputs(current_config(values), text)
    except Exception as exc:
        _problem(exc)
        return {k: gr.skip() for k in ANALYSIS}


# ---------------------------------------------------------------------------- config sources
FILL = ("text", "separator", "preset", "status")


def _fill(cfg: ModelConfig, text=None, preset=CUSTOM, status="", separator=None) -> dict:
    """Every control's value (visibility follows in the chained refresh), the text, preset, status.

    A new text comes with its separator (the default unless given): the text an encoder-decoder
    preset or a link brings splits where it was written to split, whatever the box held before."""
    out = {n: gr.update(value=u["value"]) for n, u in config_updates(cfg).items()}
    sep = gr.skip() if text is None else (separator or ui_encdec.separator(None))
    return {**out, "text": gr.skip() if text is None else text, "separator": sep, "preset": preset,
            "status": status}


def _skip_fill(status=None) -> dict:
    out = {n: gr.skip() for n in (*CONTROL_FIELDS, *FILL)}
    if status is not None:
        out["status"] = status
    return out


def apply_preset(name) -> dict:
    """A preset fills every control (the chained refresh then draws it once)."""
    if name == CUSTOM:
        return _skip_fill()
    try:
        cfg = check_limits(preset_config(name))
    except Exception as exc:
        return _skip_fill(_warn(_problem(exc)))
    return _fill(cfg, ui_encdec.SEQ2SEQ_TEXT if cfg.architecture == "encoder_decoder" else None, name, "")


def load_from_url(request: gr.Request | None) -> dict:
    """Restore every control, the text and the separator from the page's query string; hostile strings
    fall back to defaults (a bad ``sep`` alone: the default separator, the rest of the link kept)."""
    params = dict(request.query_params) if request is not None and request.query_params else {}
    picks, grid_notice = grid_from_params(params)  # grid_layers / grid_heads are not config fields
    cfg, text, preset, notice = from_query({k: v for k, v in params.items() if k not in picks})
    sep, sep_notice = link_separator(params) if notice is None else (None, None)
    notice = " ".join(n for n in (notice or sep_notice, grid_notice) if n) or None
    if notice:
        gr.Warning(shown_html(notice))
    if not params:
        return _skip_fill()
    return {**_fill(cfg, text, preset, f"⚠️ {shown(notice)}" if notice else "", separator=sep), **picks}


def read_config_file(path) -> ModelConfig:
    """A JSON config file -> validated config; size, nesting and number length bounded."""
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError("file", type(path).__name__, "a JSON file")
    size = os.path.getsize(path)
    if size > MAX_UPLOAD_BYTES:
        raise ConfigError("file", f"{size:,} bytes", f"a config JSON of at most {MAX_UPLOAD_BYTES:,} bytes")
    with open(path, "rb") as f:
        data = load_json(f.read(), what="file")
    if not isinstance(data, dict):
        raise ConfigError("file", type(data).__name__, "a JSON object of ModelConfig fields")
    return check_limits(ModelConfig.from_dict(data))


def upload_config(path) -> dict:
    """A JSON config file -> every control (the chained refresh draws it)."""
    try:
        if path is None:
            raise ConfigError("file", None, "a JSON file")
        cfg = read_config_file(path)
    except Exception as exc:
        return _skip_fill(_warn(_problem(exc)))
    return _fill(cfg, None, matching_preset(cfg), "✅ Config loaded.")
