"""The "Variant views" tab: only the views the current config's model output has (``explorer.analysis.views``).

The tab and each plot are created once and shown or hidden per config: the tab is visible only
when at least one view exists. Layer / head pickers (approximate attention only) redraw just the
comparison figure. Like every handler, failures warn nothing extra (the attention handler already
did) and return ``gr.skip()``, so the last good figures stay.
"""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from explorer.analysis import attention_maps
from explorer.analysis.source import drawn_for
from explorer.app.controls import weights as weights_switch
from explorer.app.controls.events import QUIET, picked
from explorer.app.controls.fields import CONTROL_FIELDS, current_config
from explorer.app.controls.state import read_state
from explorer.app.server.messages import problem
from explorer.app.tabs.contract import Page, Step, Tab
from explorer.figures.views import PLOT_NAMES, approximation_figure, view_figures, views_reading

LABELS = {
    "approximation": "Approximate vs exact attention",
    "approximation_table": "Approximation error per layer and head",
    "groups": "Buckets / clusters",
    "span": "Adaptive span",
    "experts": "Expert load",
    "memory": "Memory length and reach",
    "exit": "Exit depth per token",
    "act": "ACT steps per token",
    "sinkhorn": "Sinkhorn block sorting",
    "probsparse": "ProbSparse active queries",
    "talking_heads": "Talking-heads mixing",
    "residual": "Residual attention share",
    "pkm": "Product-key memory usage",
    "funnel": "Funnel length per layer",
    "induced": "Two-step attention through m points",
    "lite": "Convolution taps and branch share",
    "retrieval": "Retrieved neighbours and next-token mix",
    "feedback": "Feedback memory layer weights",
    "sandwich": "Sublayer order",
}


def build_views_tab() -> SimpleNamespace:
    """Create the tab's components (inside the caller's ``gr.Tabs``); hidden until a view exists."""
    with gr.Tab("Variant views", id="views", visible=False, elem_id="views-tab") as tab:
        md = gr.Markdown("", elem_id="views-reading")
        with gr.Row(visible=False) as pick:
            layer = gr.Dropdown([("layer 0", 0)], value=0, label="Layer", elem_id="views-layer", scale=1)
            head = gr.Dropdown([("head 0", 0)], value=0, label="Head", elem_id="views-head", scale=1)
        plots = {
            n: gr.Plot(None, label=LABELS[n], elem_id=f"view-{n.replace('_', '-')}", visible=False) for n in PLOT_NAMES
        }
    return SimpleNamespace(tab=tab, md=md, pick=pick, layer=layer, head=head, plots=plots)


OUTPUTS = ("views_tab", "views_md", "views_pick", "views_layer", "views_head", *(f"view_{n}" for n in PLOT_NAMES))


def views_outputs(cfg, text: str, layer=0, head=0, separator=None, weights=None) -> dict:
    """-> ``{views_tab, views_md, views_pick, views_layer, views_head, view_<plot>}`` (``gr.update`` each).
    ``separator``: where a source / target text splits (the views are the head stack's layers)."""
    views = attention_maps(cfg, text, separator=separator, weights=drawn_for(weights, cfg)).views
    figs = view_figures(views, _int(layer), _int(head))
    approx = views.items.get("approximation")
    if approx is not None:
        n_l, n_h = approx.effective.shape[:2]
        layer, head = min(_int(layer), n_l - 1), min(_int(head), n_h - 1)
        pickers = [
            gr.update(visible=True),
            gr.update(choices=[(f"layer {i}", i) for i in range(n_l)], value=layer),
            gr.update(choices=[(f"head {h}", h) for h in range(n_h)], value=head),
        ]
    else:
        pickers = [gr.update(visible=False), gr.update(), gr.update()]
    plots = [
        gr.update(value=figs[n], visible=True) if n in figs else gr.update(value=None, visible=False)
        for n in PLOT_NAMES
    ]
    return dict(zip(OUTPUTS, [gr.update(visible=bool(figs)), views_reading(views), *pickers, *plots]))


def _int(x) -> int:
    try:
        return max(0, int(x))
    except (TypeError, ValueError):
        return 0


def approximation_redraw(cfg, text: str, layer, head, separator=None, weights=None):
    """Only the comparison figure, for another layer / head."""
    views = attention_maps(cfg, text, separator=separator, weights=drawn_for(weights, cfg)).views
    view = views.items.get("approximation")
    if view is None:
        return gr.skip()
    return approximation_figure(view, views.tokens, _int(layer), _int(head))


def refresh_views(values: dict, text, layer=0, head=0, state=None, separator=None, weights=None) -> dict:
    """Control values -> ``views_outputs``; skipped when the attention event drew nothing new
    (``state["fresh"]`` False) or the config is bad (the attention handler already warned)."""
    if state is not None and not read_state(state)["fresh"]:
        return {k: gr.skip() for k in OUTPUTS}
    try:
        return views_outputs(current_config(values), text, layer, head, separator, weights)
    except Exception as exc:
        problem(exc)
        return {k: gr.skip() for k in OUTPUTS}


def redraw_approximation(values: dict, text, layer, head, separator=None, weights=None):
    """The approximation figure for the picked layer / head (its pickers' event)."""
    try:
        return approximation_redraw(current_config(values), text, layer, head, separator, weights)
    except Exception as exc:
        problem(exc)
        return gr.skip()


# ---------------------------------------------------------------------------- the tab (explorer.app.tabs.contract)
VIEWS_IN = ("text", "separator", "views_layer", "views_head")
VIEWS_RENAME = {"views_layer": "layer", "views_head": "head"}
# figures drawn while their tab was hidden have Plotly's default width: re-measure on opening it
RESIZE_JS = "() => { setTimeout(() => window.dispatchEvent(new Event('resize')), 80); }"


def build(landing) -> dict:
    views = build_views_tab()
    return {
        "views_tab": views.tab,
        "views_md": views.md,
        "views_pick": views.pick,
        "views_layer": views.layer,
        "views_head": views.head,
        **{f"view_{name}": plot for name, plot in views.plots.items()},
    }


def wire(page: Page) -> None:
    """Re-measure the figures on opening the tab; the approximation's layer / head pickers redraw its figure."""
    ui = page.ui
    ui["views_tab"].select(None, None, None, js=RESIZE_JS, queue=False, api_visibility="private")

    def approximation(values, text, layer, head, separator=None, weights=None):
        return {"view_approximation": redraw_approximation(values, text, layer, head, separator, weights)}

    gr.on(
        [picked(ui["views_layer"]), picked(ui["views_head"])],
        ui.handler(weights_switch.with_weights(approximation), VIEWS_RENAME),
        ui.inputs(*CONTROL_FIELDS, *VIEWS_IN, "trained", "weights"),
        ui.outputs("view_approximation"),
        trigger_mode="always_last",
        show_progress="minimal",
        api_name="redraw_view",
        concurrency_id="compute",
        **QUIET,
    )


def export(scene) -> list:
    """The views the config's model has (layer 0, head 0 for the approximation)."""
    cfg = scene.cfg
    views = [(f"view-{name}", fig) for name, fig in view_figures(scene.maps.views).items()]
    return [(f"Variant views: {cfg.attention}, {cfg.ffn}, {cfg.memory}, {cfg.layer}", views)] if views else []


TAB = Tab(
    "views",
    build,
    steps=(Step("views", refresh_views, (*VIEWS_IN, "state"), OUTPUTS, VIEWS_RENAME),),
    wire=wire,
    export=export,
)
