"""Zoom into one head of the encoder-decoder's extra grids (cross-attention, encoder self-attention).

A click on a panel of ``#cross-grid`` or ``#encoder-grid`` works like the main grid's
(``explorer.app.tabs.parts.grid``): ``CLICK_JS`` reads the clicked trace's ``meta = [layer, head]``
(``figures.stacks.stack_grid``), keeps ``[grid, layer, head]`` on the page and presses a hidden button;
its ``PICK_JS`` writes them into a hidden box as ``"cross-grid 1 2"`` and brings the zoom on screen, and
one request draws that head large with its tokens on both axes (``figures.zoom.head_figure``) from the
memoised maps (no model run). The zoom is hidden until the first click, and again whenever the maps are
redrawn (``explorer.app.tabs.parts.stacks.attention_updates``): it never shows a head of maps no longer on screen.
"""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from explorer.analysis import attention_maps
from explorer.analysis.source import drawn_for
from explorer.app.controls import weights as ui_weights
from explorer.app.controls.click_js import click_to_pick
from explorer.app.controls.fields import CONTROL_FIELDS
from explorer.app.controls.state import drawn_config
from explorer.app.server.messages import problem, warn
from explorer.figures.stacks import map_title
from explorer.figures.zoom import head_figure
from models import ConfigError

OUTPUTS = ("stack_zoom",)
GRIDS = {"cross-grid": "cross_grid", "encoder-grid": "encoder_grid"}  # element id -> slot (stacks.slot_maps)

CLICK_JS = click_to_pick(
    list(GRIDS), "[id, Number(m[0]), Number(m[1])]", store="__stackPick", button_id="stack-zoom-go"
)
PICK_JS = """(pick) => {
  const p = window.__stackPick; window.__stackPick = null;
  const box = document.querySelector('#stack-zoom');
  if (p && box) setTimeout(() => box.scrollIntoView({behavior: 'smooth', block: 'nearest'}), 300);
  return p ? p.join(' ') : pick;
}"""


def build_stack_zoom() -> SimpleNamespace:
    """The hidden pick box and button, and the zoom figure (inside the Attention tab, under the grids)."""
    pick = gr.Textbox("", visible=False, elem_id="stack-pick")
    go = gr.Button("zoom", elem_id="stack-zoom-go", elem_classes="offscreen", size="sm")
    plot = gr.Plot(None, label="One head of the grid above", elem_id="stack-zoom", visible=False)
    return SimpleNamespace(pick=pick, go=go, plot=plot)


def parse_pick(pick) -> tuple:
    """``"cross-grid 1 2"`` -> ``("cross_grid", 1, 2)``; anything else is a ``ConfigError``."""
    parts = str(pick or "").split()
    if len(parts) != 3 or parts[0] not in GRIDS or not all(p.isdigit() and len(p) <= 3 for p in parts[1:]):
        raise ConfigError(
            "stack_pick",
            str(pick)[:40],
            f"'<grid> <layer> <head>' with grid one of {', '.join(GRIDS)} and whole numbers for layer and head",
        )
    return GRIDS[parts[0]], int(parts[1]), int(parts[2])


def refresh_stack_zoom(values: dict, text, pick=None, separator=None, weights=None) -> dict:
    """-> the picked head of the picked extra grid, large (a warning and nothing redrawn on bad input)."""
    from explorer.app.tabs.parts.stacks import slot_maps

    try:
        slot, layer, head = parse_pick(pick)
        cfg = drawn_config(values, weights)  # the config the request's weights source was resolved for
        maps = slot_maps(attention_maps(cfg, text, separator=separator, weights=drawn_for(weights, cfg)))
        if slot not in maps:
            have = ", ".join(k for k, v in GRIDS.items() if v in maps) or "none"
            raise ConfigError("stack_pick", str(pick)[:40], f"a grid this model draws ({have})")
        m = maps[slot]
        n_l, n_h = m.attention.shape[:2]
        if layer >= n_l or head >= n_h:
            raise ConfigError("stack_pick", str(pick)[:40], f"layer 0-{n_l - 1} and head 0-{n_h - 1}")
    except Exception as exc:  # a warning toast naming the field (or an incident, logged); nothing redrawn
        warn(problem(exc))
        return {"stack_zoom": gr.skip()}
    return {
        "stack_zoom": gr.update(
            value=head_figure(m, layer, head, title=map_title(m)),
            visible=True,
            label=f"{map_title(m)}: layer {layer}, head {head}",
        )
    }


def wire(demo, ui) -> None:
    """A click on an extra grid's panel -> the zoom (``ui``: ``explorer.app.controls.events.Components``)."""
    demo.load(None, None, None, js=CLICK_JS, queue=False, api_visibility="private")
    ui["stack_zoom_go"].click(
        None, [ui["stack_pick"]], [ui["stack_pick"]], js=PICK_JS, queue=False, api_visibility="private"
    ).then(
        ui.handler(ui_weights.with_weights(refresh_stack_zoom), {"stack_pick": "pick"}),
        ui.inputs(*CONTROL_FIELDS, "text", "separator", "stack_pick", "trained", "weights"),
        ui.outputs(*OUTPUTS),
        show_progress="minimal",
        api_name="stack_zoom",
        api_visibility="undocumented",
        concurrency_id="compute",
    )
