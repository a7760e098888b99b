"""The attention grid a speaker can drive: which layers / heads it shows, and click a panel to zoom.

- "Layers shown" / "Heads shown" (``explorer.app.grid_pick`` specs: "all", "0-3", "0,2,5-7"): a commit
  redraws only the grid from the memoised maps (``experiments.attention_maps``: no model run when
  the maps are cached) and puts the picks into the share link.
- Click a panel: ``CLICK_JS`` (attached once on page load) listens to Plotly's ``plotly_click`` on
  the grid, reads the clicked trace's ``meta = [layer, head]`` (``plots.attention_grid``), keeps it
  on the page and clicks a hidden button; that button's ``PICK_JS`` writes it into the zoom's
  layer / head pickers in the browser, and one request redraws the zoom (``ui_zoom.refresh_zoom``).
"""
from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from explorer.analysis import experiments as ex
from explorer.app import seq2seq as ui_encdec
from explorer.app import weights as ui_trained
from explorer.app.controls import CONTROL_FIELDS
from explorer.app.grid_pick import ALL, MAX_GRID, with_grid
from explorer.app.state import drawn_digest, read_state
from explorer.app.messages import problem, as_text, warn
from explorer.app.controls import current_config
from explorer.app.tabs.attention import grid_figure
from explorer.app.share import to_query
from explorer.app.tabs import zoom as ui_zoom
from explorer.runtime.presets import matching_preset

OUTPUTS = ("grid", "share_qs", "status", "state")
HINT = f'"all", "2", "0-3" or "0,2,5-7"; at most {MAX_GRID} are drawn'

# Runs once per page: hook every (re)drawn grid; a click keeps [layer, head] on the page and presses
# the hidden button (one click = one zoom request). Plotly.react keeps the listener across redraws;
# the flag re-attaches it if Gradio ever mounts a new plot element.
CLICK_JS = """() => {
  const hook = () => {
    const gd = document.querySelector('#attention-grid .js-plotly-plot');
    if (!gd || typeof gd.on !== 'function' || gd.__zoomHooked) return;
    gd.__zoomHooked = true;
    gd.on('plotly_click', (ev) => {
      const m = ev && ev.points && ev.points[0] && ev.points[0].data && ev.points[0].data.meta;
      if (!Array.isArray(m) || m.length !== 2) return;
      window.__gridPick = [Number(m[0]), Number(m[1])];
      const go = document.querySelector('#grid-zoom-go');
      const btn = go && (go.tagName === 'BUTTON' ? go : go.querySelector('button'));
      if (btn) btn.click();
    });
  };
  hook();
  new MutationObserver(hook).observe(document.body, {childList: true, subtree: true});
}"""
# The hidden button's client-side step: the clicked [layer, head] into the zoom pickers.
PICK_JS = "(layer, head) => { const p = window.__gridPick; window.__gridPick = null; return p || [layer, head]; }"


def build_pickers() -> SimpleNamespace:
    """The two pickers (above the grid) and the hidden button the click presses."""
    with gr.Row(elem_id="grid-pickers"):
        layers = gr.Textbox(ALL, label="Layers shown", elem_id="grid-layers", max_lines=1, max_length=64,
                            info=HINT, scale=1)
        heads = gr.Textbox(ALL, label="Heads shown", elem_id="grid-heads", max_lines=1, max_length=64,
                           info=HINT, scale=1)
    go = gr.Button("zoom", elem_id="grid-zoom-go", elem_classes="offscreen", size="sm")
    return SimpleNamespace(layers=layers, heads=heads, go=go)


def redraw_grid(values: dict, text, grid_layers=ALL, grid_heads=ALL, state=None, separator=None) -> dict:
    """-> the grid of the picked layers / heads, the share link, status and state; nothing is
    redrawn when the picks and config are what the grid already shows."""
    state = read_state(state)
    text = as_text(text)
    try:
        cfg = current_config(values)
        drawn = drawn_digest(cfg, text, separator, (grid_layers, grid_heads))
        if drawn == state["drawn"]:
            return {"grid": gr.skip(), "share_qs": gr.skip(), "status": gr.skip(), "state": gr.skip()}
        maps = ex.attention_maps(cfg, text, separator=ui_encdec.separator(separator))
        fig = grid_figure(maps, grid_layers, grid_heads, strict=True)
    except Exception as exc:  # a bad pick (ConfigError naming the box) or config: keep the last grid
        return {"grid": gr.skip(), "share_qs": gr.skip(), "status": warn(problem(exc)), "state": gr.skip()}
    return {"grid": fig, "share_qs": with_grid(to_query(cfg, text, matching_preset(cfg)), grid_layers, grid_heads),
            "status": "", "state": {**state, "drawn": drawn, "fresh": False}}


def wire(demo, n, zoom_in: tuple, zoom_rename: dict) -> None:
    """The pickers redraw only the grid; a click on a panel zooms into it. ``n``: ``explorer.app.layout.Named``
    (components by name); ``zoom_in`` / ``zoom_rename``: the zoom event's inputs and their renaming."""
    c = n.c
    gr.on([c["grid_layers"].submit, c["grid_layers"].blur, c["grid_heads"].submit, c["grid_heads"].blur],
          n.fn(ui_trained.with_weights(redraw_grid)),
          n.ins(*CONTROL_FIELDS, "text", "separator", "grid_layers", "grid_heads", "state", "trained"),
          n.outs(*OUTPUTS), trigger_mode="always_last", show_progress="minimal", api_name="redraw_grid",
          api_visibility="undocumented", concurrency_id="compute")
    demo.load(None, None, None, js=CLICK_JS, queue=False, api_visibility="private")
    c["grid_zoom_go"].click(None, [c["zoom_layer"], c["zoom_head"]], [c["zoom_layer"], c["zoom_head"]],
                            js=PICK_JS, queue=False, api_visibility="private").then(
        n.fn(ui_trained.with_weights(ui_zoom.refresh_zoom), zoom_rename), n.ins(*zoom_in, "trained"),
        n.outs(*ui_zoom.OUTPUTS), show_progress="minimal", api_name="zoom_click", api_visibility="undocumented",
        concurrency_id="compute")
