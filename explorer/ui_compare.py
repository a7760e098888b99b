"""The "Compare A/B" tab: pin the configuration on screen as A, change the controls (B), see both.

A lives in a per-session ``gr.State`` (its config dict only, a few hundred bytes). The tab shows
what differs (fields, parameters, FLOPs per token), the attention maps of A and B side by side on
the same text, and their gradient norms overlaid. Its share link carries B (the controls), A
(``pin=``, itself a share query) and the active tab (``tab=compare``); opening it restores both.
Handlers follow ``ui_handlers``' convention: values by name in, ``{name: value}`` out, a bad
config warns and skips.
"""
from __future__ import annotations

from types import SimpleNamespace
from urllib.parse import parse_qsl, urlencode

import gradio as gr

from models import ModelConfig

from . import compare, plots
from . import experiments as ex
from .limits import check_limits
from .share import from_query, to_query
from .ui_api import _api, _api_config, _api_text  # the documented API's parsing and error rules
from .ui_handlers import _problem, _text, _warn, current_config

OUTPUTS = ("compare_md", "grid_a", "grid_b", "compare_grad", "compare_link")
TAB_IDS = ("attention", "views", "gradients", "latency", "model", "compare")


def pin_button() -> gr.Button:
    """The pin button, placed by the caller where it is always visible (above the tabs)."""
    return gr.Button("Pin as A (compare)", variant="primary", size="sm", elem_id="pin-a", scale=0, min_width=160)


def build_compare_tab() -> SimpleNamespace:
    """The tab's components (inside the caller's ``gr.Tabs``)."""
    with gr.Tab("Compare A/B", id="compare", elem_id="compare-tab") as tab:
        with gr.Row():
            refresh = gr.Button("Compare A with the controls now (B)", elem_id="compare-run", scale=0, min_width=260)
        md = gr.Markdown("Press **Pin as A** (top right) to keep the configuration on screen as A, then change the controls "
                         "and open this tab again: B is whatever the controls show.", elem_id="compare-reading")
        with gr.Row(equal_height=False):
            grid_a = gr.Plot(None, label="A (pinned): attention maps", elem_id="compare-grid-a")
            grid_b = gr.Plot(None, label="B (now): attention maps", elem_id="compare-grid-b")
        grad = gr.Plot(None, label="Gradient norms, A vs B", elem_id="compare-grad")
        link = gr.Textbox("", label="Share link (A, B and this tab)", elem_id="compare-link", buttons=["copy"],
                          interactive=False)
    return SimpleNamespace(tab=tab, refresh=refresh, md=md, grid_a=grid_a, grid_b=grid_b, grad=grad,
                           link=link)


def pin_config(values: dict, text=None) -> dict:
    """-> ``{"pinned": A's config dict}``; a bad config warns and pins nothing."""
    try:
        return {"pinned": current_config(values).to_dict()}
    except Exception as exc:
        _warn(_problem(exc))
        return {"pinned": gr.skip()}


def compare_query(a: ModelConfig, b: ModelConfig, text: str) -> str:
    """The share query of the comparison: B's own query, A's query under ``pin``, and the tab."""
    qb = to_query(b, text)
    extra = urlencode({"pin": to_query(a), "tab": "compare"})
    return f"{qb}&{extra}" if qb else extra


def compare_outputs(a: ModelConfig, b: ModelConfig, text: str) -> dict:
    text = _text(text)
    maps_a, maps_b = ex.attention_maps(a, text), ex.attention_maps(b, text)
    grad_a, grad_b = ex.gradient_norms(a), ex.gradient_norms(b)
    seq = max(1, len(maps_b.tokens))
    md = compare.diff_markdown(a, b, ex.model_summary(a, seq_len=seq), ex.model_summary(b, seq_len=seq))
    return {"compare_md": md + "\n\nBoth maps are drawn on the same input text; each has its own colour scale.",
            "grid_a": plots.attention_grid(maps_a), "grid_b": plots.attention_grid(maps_b),
            "compare_grad": compare.gradient_compare_figure(grad_a, grad_b),
            "compare_link": compare_query(a, b, text)}


def refresh_compare(values: dict, text, pinned) -> dict:
    """A (pinned) vs B (the controls) -> the tab's outputs; nothing pinned -> a hint, figures kept."""
    if not pinned:
        return {"compare_md": "Nothing pinned yet: press **Pin as A** (top right) first.",
                **{k: gr.skip() for k in OUTPUTS if k != "compare_md"}}
    try:
        a = check_limits(ModelConfig.from_dict(pinned))
        return compare_outputs(a, current_config(values), text)
    except Exception as exc:
        return {"compare_md": _warn(_problem(exc)), **{k: gr.skip() for k in OUTPUTS if k != "compare_md"}}


def pinned_from_url(request: gr.Request | None) -> dict:
    """A link's ``pin`` (a share query of A) -> ``{"pinned": dict or None, "tabs": selected tab}``.
    A malformed ``pin`` pins nothing (``from_query`` never raises); an unknown tab changes nothing."""
    params = dict(request.query_params) if request is not None else {}
    out = {"pinned": gr.skip(), "tabs": gr.skip()}
    if "pin" in params:
        cfg, _, _, notice = from_query(_parse(params["pin"]))
        out["pinned"] = None if notice else cfg.to_dict()
    if params.get("tab") in TAB_IDS:
        out["tabs"] = gr.Tabs(selected=params["tab"])
    return out


def _parse(query: str) -> dict:
    return dict(parse_qsl(str(query)[:4000], keep_blank_values=True))


def api_compare(config_a_json: str, config_b_json: str, text: str) -> dict:
    """``/compare``: ``{"diff": [[field, A, B], ...], "a": {...}, "b": {...}, "link": query}``, where
    ``a`` / ``b`` hold each config's attention summary and gradient norms on the same text."""
    def run():
        a, b, t = _api_config(config_a_json), _api_config(config_b_json), _api_text(text)
        side = {k: {"attention": ex.attention_maps(c, t).summary(), "gradients": ex.gradient_norms(c)}
                for k, c in (("a", a), ("b", b))}
        return {"diff": [list(r) for r in compare.config_diff(a, b)], **side, "link": compare_query(a, b, t)}
    return _api(run)
