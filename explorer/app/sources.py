"""Sources."""
from __future__ import annotations
import os
import gradio as gr
from explorer.app import seq2seq as ui_encdec
from explorer.app.controls import CONTROL_FIELDS, config_updates
from explorer.app.grid_pick import grid_from_params
from explorer.app.share import from_query, link_separator
from explorer.runtime.limits import check_limits
from explorer.runtime.presets import CUSTOM, matching_preset, preset_config
from explorer.runtime.untrusted import load_json, shown, shown_html
from models import ConfigError, ModelConfig
from explorer.app.messages import problem
from explorer.app.messages import warn


MAX_UPLOAD_BYTES = 100_000


# ---------------------------------------------------------------------------- config sources
FILL = ("text", "separator", "preset", "status")


def fill_controls(cfg: ModelConfig, text=None, preset=CUSTOM, status="", separator=None) -> dict:
    """Every control's value (visibility follows in the chained refresh), the text, preset, status.

    A new text comes with its separator (the default unless given): the text an encoder-decoder
    preset or a link brings splits where it was written to split, whatever the box held before."""
    out = {n: gr.update(value=u["value"]) for n, u in config_updates(cfg).items()}
    sep = gr.skip() if text is None else (separator or ui_encdec.separator(None))
    return {**out, "text": gr.skip() if text is None else text, "separator": sep, "preset": preset,
            "status": status}


def skip_fill(status=None) -> dict:
    out = {n: gr.skip() for n in (*CONTROL_FIELDS, *FILL)}
    if status is not None:
        out["status"] = status
    return out


def apply_preset(name) -> dict:
    """A preset fills every control (the chained refresh then draws it once)."""
    if name == CUSTOM:
        return skip_fill()
    try:
        cfg = check_limits(preset_config(name))
    except Exception as exc:
        return skip_fill(warn(problem(exc)))
    return fill_controls(cfg, ui_encdec.SEQ2SEQ_TEXT if cfg.architecture == "encoder_decoder" else None, name, "")


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
        return skip_fill()
    return {**fill_controls(cfg, text, preset, f"⚠️ {shown(notice)}" if notice else "", separator=sep), **picks}


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
        return skip_fill(warn(problem(exc)))
    return fill_controls(cfg, None, matching_preset(cfg), "✅ Config loaded.")
