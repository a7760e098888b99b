"""The attention grid a speaker can drive: which layers / heads it shows, and click a panel to zoom.

- "Layers shown" / "Heads shown" (``explorer.app.controls.grid_pick`` specs: "all", "0-3", "0,2,5-7"): a commit
  redraws only the grid from the memoised maps and puts the picks into the share link
  (``tabs.attention.redraw_grid``, which draws and links like a control's commit).
- Click a panel: ``CLICK_JS`` (attached once on page load) listens to Plotly's ``plotly_click`` on
  the grid, reads the clicked trace's ``meta = [layer, head]`` (``figures.attention.attention_grid``),
  keeps it on the page and clicks a hidden button; that button's ``PICK_JS`` writes it into the
  zoom's layer / head pickers in the browser and scrolls the zoom on screen when it is not, and one
  request redraws the zoom (``parts.zoom``).
"""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from explorer.app.controls import weights as ui_trained
from explorer.app.controls.click_js import click_to_pick
from explorer.app.controls.fields import CONTROL_FIELDS
from explorer.app.controls.grid_pick import ALL, MAX_GRID
from explorer.app.tabs.parts import zoom as ui_zoom

OUTPUTS = ("grid", "share_qs", "status", "state")
HINT = f'"all", "2", "0-3" or "0,2,5-7"; at most {MAX_GRID} are drawn'

# Runs once per page: hook every (re)drawn grid; a click keeps [layer, head] on the page and presses
# the hidden button (one click = one zoom request). Plotly.react keeps the listener across redraws;
# the flag re-attaches it if Gradio ever mounts a new plot element.
CLICK_JS = click_to_pick(
    ["attention-grid"], "[Number(m[0]), Number(m[1])]", store="__gridPick", button_id="grid-zoom-go"
)
# Brings the zoom on screen when it is not (it sits below the grid: an update there went unseen): its top
# to the top of the screen, the zoom usually being taller than half of it.
SHOW_ZOOM = """const box = document.querySelector('#zoom-plot') || document.querySelector('#zoom-box');
  if (box) { const r = box.getBoundingClientRect();
    if (r.top < 0 || r.top > window.innerHeight - Math.min(r.height, window.innerHeight) / 2)
      box.scrollIntoView({block: 'start'}); }"""
# The hidden button's client-side step: the clicked [layer, head] into the zoom pickers, and the zoom
# brought on screen at once; once the zoom is redrawn (the page above it may have moved) again (SHOWN_JS).
PICK_JS = (
    """(layer, head) => {
  const p = window.__gridPick; window.__gridPick = null;
  if (p) { window.__zoomShow = true; """
    + SHOW_ZOOM
    + """ }
  return p || [layer, head];
}"""
)
SHOWN_JS = """() => { if (!window.__zoomShow) return; window.__zoomShow = false; """ + SHOW_ZOOM + """ }"""


def build_pickers() -> SimpleNamespace:
    """The two pickers (under the grid) and the hidden button the click presses."""
    with gr.Row(elem_id="grid-pickers"):
        layers = gr.Textbox(
            ALL, label="Layers shown", elem_id="grid-layers", max_lines=1, max_length=64, info=HINT, scale=1
        )
        heads = gr.Textbox(
            ALL, label="Heads shown", elem_id="grid-heads", max_lines=1, max_length=64, info=HINT, scale=1
        )
    go = gr.Button("zoom", elem_id="grid-zoom-go", elem_classes="offscreen", size="sm")
    return SimpleNamespace(layers=layers, heads=heads, go=go)


def wire(demo, ui, zoom_in: tuple, zoom_rename: dict, redraw_grid) -> None:
    """The pickers redraw only the grid (``redraw_grid``: the Attention tab's handler); a click on a panel
    zooms into it. ``ui``: ``explorer.app.controls.events.Components``; ``zoom_in`` / ``zoom_rename``: the
    zoom event's inputs and their renaming."""
    gr.on(
        [ui["grid_layers"].submit, ui["grid_layers"].blur, ui["grid_heads"].submit, ui["grid_heads"].blur],
        ui.handler(ui_trained.with_weights(redraw_grid)),
        ui.inputs(*CONTROL_FIELDS, "text", "separator", "grid_layers", "grid_heads", "state", "trained", "weights"),
        ui.outputs(*OUTPUTS),
        trigger_mode="always_last",
        show_progress="minimal",
        api_name="redraw_grid",
        api_visibility="undocumented",
        concurrency_id="compute",
    )
    demo.load(None, None, None, js=CLICK_JS, queue=False, api_visibility="private")
    ui["grid_zoom_go"].click(
        None,
        [ui["zoom_layer"], ui["zoom_head"]],
        [ui["zoom_layer"], ui["zoom_head"]],
        js=PICK_JS,
        queue=False,
        api_visibility="private",
    ).then(
        ui.handler(ui_trained.with_weights(ui_zoom.refresh_zoom), zoom_rename),
        ui.inputs(*zoom_in),
        ui.outputs(*ui_zoom.OUTPUTS),
        show_progress="minimal",
        api_name="zoom_click",
        api_visibility="undocumented",
        concurrency_id="compute",
    ).then(None, None, None, js=SHOWN_JS, queue=False, api_visibility="private")
