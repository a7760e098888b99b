"""Reset to defaults and undo: a per-session list of the configurations the figures have shown.

The history is a ``gr.State`` of at most ``MAX_HISTORY`` config dicts (a few hundred bytes each),
appended to when the attention figures are redrawn for a new config. Undo drops the newest entry
and fills the controls with the one before, reset fills them with the defaults; both then run the
usual redraw chain, so what is shown always comes from the same handlers as a manual edit.

The browser's own history holds the committed links (``explorer.app.controls.share_js`` pushes one per change):
``from_address`` reads the address bar again when Back or Forward brings an earlier one, as the page's
load does, an address without a query being the defaults.
"""

from __future__ import annotations

from explorer.app.controls.fields import adjust_causal, current_config
from explorer.app.controls.sources import fill_controls, load_from_url, skip_fill
from explorer.runtime.configs import app_config
from explorer.runtime.presets import CUSTOM, matching_preset
from explorer.runtime.text import DEFAULT_TEXT
from models import ModelConfig

MAX_HISTORY = 20


def record(values: dict, out: dict, history) -> list:
    """``history`` with the drawn config appended when ``out`` (the attention handler's result) drew
    new figures; unchanged otherwise."""
    history = list(history or [])
    if isinstance(out.get("grid"), dict) and out["grid"].get("__type__") == "update":  # gr.skip(): nothing drawn
        return history
    try:
        cfg = current_config(adjust_causal(dict(values))[0]).to_dict()
    except Exception:
        return history
    if not history or history[-1] != cfg:
        history.append(cfg)
    return history[-MAX_HISTORY:]


def reset() -> dict:
    """The defaults (config and text) in the controls; the history keeps what came before."""
    return fill_controls(
        ModelConfig(), DEFAULT_TEXT, CUSTOM, "↺ Defaults restored; **Undo** brings the previous configuration back."
    )


def undo(history, values: dict | None = None) -> dict:
    """The previous drawn configuration in the controls (text kept) and the shortened history.

    ``values``: the controls as the page holds them. When they differ from the newest entry, the
    figures for them have not been recorded yet (Undo pressed right after Reset, before the reset's
    redraw answered): the newest entry is then the configuration to go back to, and it stays."""
    history = list(history or [])
    if history and values:
        try:
            pending = current_config(adjust_causal(dict(values))[0]).to_dict() != history[-1]
        except Exception:  # controls that describe no valid config: go back to the last drawn one
            pending = True
        if pending:
            cfg = app_config(history[-1])
            return {
                **fill_controls(cfg, None, matching_preset(cfg), "↶ Previous configuration restored."),
                "history": history,
            }
    if len(history) < 2:
        return {**skip_fill("Nothing to undo."), "history": history}
    history.pop()
    cfg = app_config(history[-1])
    return {**fill_controls(cfg, None, matching_preset(cfg), "↶ Previous configuration restored."), "history": history}


def from_address(request, owned=frozenset()) -> dict:
    """The controls of the link now in the address bar (``request``: the event's, whose query Gradio's
    client takes from the address bar): the defaults for an address without one, else as on load
    (``owned``: the parameters the tabs read themselves)."""
    params = dict(request.query_params) if request is not None and request.query_params else {}
    if not any(not str(k).startswith("__") for k in params):
        return fill_controls(ModelConfig(), DEFAULT_TEXT, CUSTOM, "")
    return load_from_url(request, owned)
