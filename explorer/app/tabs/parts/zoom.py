"""Zoom into one head of the Attention tab: layer / head pickers and a large labelled heatmap
(``figures.zoom.head_figure``). The pickers' choices follow the config's layers and heads; the maps
come from the same memoised ``analysis.attention_maps`` as the grid (same text, separator and
weights), so a zoom costs no model run."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from explorer.analysis import attention_maps
from explorer.analysis.source import drawn_for
from explorer.app.controls.fields import current_config
from explorer.app.server.messages import problem
from explorer.figures.zoom import head_figure

OUTPUTS = ("zoom_layer", "zoom_head", "zoom")


def build_zoom() -> SimpleNamespace:
    """The pickers and the figure (inside the Attention tab)."""
    with gr.Accordion("Zoom into one head (token labels, exact probabilities)", open=True, elem_id="zoom-box"):
        with gr.Row():
            layer = gr.Dropdown([("layer 0", 0)], value=0, label="Layer", elem_id="zoom-layer", scale=1)
            head = gr.Dropdown([("head 0", 0)], value=0, label="Head", elem_id="zoom-head", scale=1)
        plot = gr.Plot(None, label="One head", elem_id="zoom-plot")
    return SimpleNamespace(layer=layer, head=head, plot=plot)


def refresh_zoom(values: dict, text, layer=0, head=0, separator=None, weights=None) -> dict:
    """-> pickers (choices of this config, value kept when it still exists) and the head's figure."""
    try:
        cfg = current_config(values)
        maps = attention_maps(cfg, text, separator=separator, weights=drawn_for(weights, cfg))
    except Exception as exc:
        problem(exc)
        return {k: gr.skip() for k in OUTPUTS}
    n_l, n_h = maps.attention.shape[:2]
    layer = int(layer) if layer is not None and 0 <= int(layer) < n_l else 0
    head = int(head) if head is not None and 0 <= int(head) < n_h else 0
    return {
        "zoom_layer": gr.Dropdown(choices=[(f"layer {i}", i) for i in range(n_l)], value=layer),
        "zoom_head": gr.Dropdown(choices=[(f"head {i}", i) for i in range(n_h)], value=head),
        "zoom": head_figure(maps, layer, head),
    }
