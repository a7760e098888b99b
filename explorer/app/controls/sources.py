"""Where a whole configuration comes from besides the controls: a preset, a share link, an uploaded file.

Each source fills every control at once (``fill_controls``: values only; the chained redraw then
draws it once and updates the controls' visibility), through the one config door
(``explorer.runtime.configs.app_config``), so each is held to the same caps and budget as the
controls. A source that cannot be used leaves the controls as they are and says why, naming the
field; a link's other hostile values fall back to the defaults with a notice (``explorer.app.controls.share``).
"""

from __future__ import annotations

import os

import gradio as gr

from explorer.app.controls.fields import CONTROL_FIELDS, config_updates
from explorer.app.controls.grid_pick import grid_from_params
from explorer.app.controls.share import CKPT_PARAM, from_query, link_separator
from explorer.app.server.messages import problem, warn
from explorer.runtime.configs import app_config
from explorer.runtime.presets import CUSTOM, LESSONS, matching_preset, preset_config, preset_text
from explorer.runtime.text import DEFAULT_SEPARATOR, default_text, reads_pair
from explorer.runtime.untrusted import load_json, shown, shown_html
from models import ConfigError, ModelConfig

MAX_UPLOAD_BYTES = 100_000
FILL = ("text", "separator", "preset", "status")


def fill_controls(cfg: ModelConfig, text=None, preset=CUSTOM, status="", separator=None) -> dict:
    """Every control's value (visibility follows in the chained refresh), the text, preset, status.

    A new text comes with its separator (the default unless given): the text a preset or a link
    brings splits where it was written to split, whatever the box held before."""
    out = {n: gr.update(value=u["value"]) for n, u in config_updates(cfg).items()}
    sep = gr.skip() if text is None else (separator or DEFAULT_SEPARATOR)
    return {**out, "text": gr.skip() if text is None else text, "separator": sep, "preset": preset, "status": status}


def skip_fill(status=None) -> dict:
    out = {n: gr.skip() for n in (*CONTROL_FIELDS, *FILL)}
    if status is not None:
        out["status"] = status
    return out


def apply_preset(name) -> dict:
    """A preset fills every control (the chained refresh then draws it once); a preset whose model
    reads a source and a target brings an example text that splits at the separator, a lesson preset
    the text its lesson needs."""
    if name == CUSTOM:
        return skip_fill()
    try:
        cfg = app_config(preset_config(name))
    except Exception as exc:
        return skip_fill(warn(problem(exc)))
    text = preset_text(name) or (default_text(cfg) if reads_pair(cfg) else None)
    # a lesson says what to look at (its instructions), once, in the status line the redraw keeps
    status = f"**{shown(name)}**: {shown(LESSONS[name][0])}" if name in LESSONS else ""
    return fill_controls(cfg, text, name, status)


def load_from_url(request: gr.Request | None, owned=frozenset()) -> dict:
    """Restore every control, the text and the separator from the page's query string; hostile strings
    fall back to defaults (a bad ``sep`` alone: the default separator, the rest of the link kept).
    ``owned``: the parameters the tabs read themselves (``explorer.app.tabs.link_params``)."""
    params = dict(request.query_params) if request is not None and request.query_params else {}
    picks, grid_notice = grid_from_params(params)  # grid_layers / grid_heads are not config fields
    if CKPT_PARAM in params:  # a pretrained checkpoint's link: its id and the controls' changes to its config
        from explorer.app.controls.checkpoint_link import restore

        return {
            **restore(
                {
                    k: v
                    for k, v in params.items()
                    if k not in picks and not str(k).startswith("__") and k not in owned and k not in ("view", "tab")
                },
                fill_controls,
            ),
            **picks,
        }
    cfg, text, preset, notice = from_query({k: v for k, v in params.items() if k not in picks}, owned)
    sep, sep_notice = link_separator(params) if notice is None else (None, None)
    notice = " ".join(n for n in (notice or sep_notice, grid_notice) if n) or None
    if notice:
        gr.Warning(shown_html(notice))
    if not params:
        return skip_fill()
    return {**fill_controls(cfg, text, preset, f"⚠️ {shown(notice)}" if notice else "", separator=sep), **picks}


def read_config_file(path) -> ModelConfig:
    """A JSON config file -> a config through the door; size, nesting and number length bounded."""
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError("file", type(path).__name__, "a JSON file")
    size = os.path.getsize(path)
    if size > MAX_UPLOAD_BYTES:
        raise ConfigError("file", f"{size:,} bytes", f"a config JSON of at most {MAX_UPLOAD_BYTES:,} bytes")
    with open(path, "rb") as f:
        data = load_json(f.read(), what="file")
    if not isinstance(data, dict):
        raise ConfigError("file", type(data).__name__, "a JSON object of ModelConfig fields")
    return app_config(data)


def upload_config(path) -> dict:
    """A JSON config file -> every control (the chained refresh draws it)."""
    try:
        if path is None:
            raise ConfigError("file", None, "a JSON file")
        cfg = read_config_file(path)
    except Exception as exc:
        return skip_fill(warn(problem(exc)))
    return fill_controls(cfg, None, matching_preset(cfg), "✓ Config loaded.")
