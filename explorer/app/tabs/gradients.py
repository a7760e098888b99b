"""The Gradients tab: per-layer gradient norms of every norm placement, filled in the chain's analysis stage.

``gradient_panel`` draws the figure and its reading (``explorer.analysis.gradients.norms.drawn_gradients``, the
path the export and ``/gradients`` take too: every norm placement, the weights drawn for the placement
they belong to, the others at initialisation; a pretrained checkpoint's own placement on its loss on the
text); on a bundled model with a post-LN twin, Theorem 1's depth-scaling panel stands above the profile
(``parts.gradients_depth``). A model of several stacks adds its per-stack figure. Skipped when the grid
event drew nothing new.

Drawn only where it is seen: the figure measures every norm placement, and Theorem 1's sweep builds up to
84 models (9-25 s on two CPU cores for a config whose sweep is not stored), so the chain draws it only
while the tab is open (``open_tab``, the page's record of it; unknown, as for an API client: drawn).
``grad_for`` holds the key of the scene on screen (``scene_key``: the drawn config, the text, the
weights' digest); opening the tab draws the current scene when the key differs, and skips otherwise.
"""

from __future__ import annotations

import hashlib
import json

import gradio as gr

from explorer.analysis import gradient_norms
from explorer.analysis.gradients.norms import drawn_gradients
from explorer.analysis.source import drawn_for
from explorer.app.controls import weights as weights_switch
from explorer.app.controls.committed import from_committed
from explorer.app.controls.events import QUIET
from explorer.app.controls.state import after_the_grid, drawn_config
from explorer.app.tabs.contract import Landing, Page, Step, Tab
from explorer.app.tabs.parts import stacks
from explorer.app.tabs.parts.gradients_depth import depth_panel
from explorer.figures.gradients import gradient_figure
from explorer.figures.readings import gradient_reading
from explorer.figures.stacks import stack_gradient_figure
from models import ModelConfig

TAB_ID = "gradients"
OUTPUTS = ("grad", "grad_md", *stacks.ANALYSIS)
DRAWN = "grad_for"  # the key of the scene the tab shows (``scene_key``)
OPEN = "open_tab"  # the page's record of the tab the visitor has open (None: unknown, draw)


def gradient_panel(cfg: ModelConfig, text: str, weights=None) -> tuple:
    """``(figure, reading, drawn)``: the Gradients tab's figure and reading of ``cfg`` drawn with ``weights``
    (the record drawn for ``cfg``, ``explorer.analysis.source.drawn_for``'s, or None) and the
    ``DrawnGradients`` they show; the export draws this."""
    drawn = drawn_gradients(cfg, text, weights)
    title = None
    if drawn.on_text:
        title = (
            f"Gradient norms of the pretrained checkpoint's next-token loss on your text ({drawn.tokens} tokens), "
            f"{cfg.norm_placement} placement"
        )
    reading = gradient_reading(drawn.results, cfg.norm_placement, drawn.skipped)
    theorem = None if drawn.on_text else depth_panel(cfg, weights, drawn.results)  # Theorem 1 above the profile
    if theorem is not None:
        return theorem[0], f"{theorem[1]}\n\n{reading}", drawn
    return gradient_figure(drawn.results, cfg.norm_placement, title), reading, drawn


def gradients_outputs(cfg: ModelConfig, text: str, weights=None) -> dict:
    """``{grad, grad_md, grad_stacks}`` of ``cfg`` drawn with ``weights``."""
    w = drawn_for(weights, cfg)
    fig, reading, _drawn = gradient_panel(cfg, text, w)
    return {"grad": fig, "grad_md": reading, **stacks.analysis_updates(cfg, w)}


def scene_key(cfg: ModelConfig, text: str, weights=None) -> str:
    """What the tab's figures depend on, as a short digest: the drawn config, the text and the digest of the
    weights drawn for it (None: initial weights)."""
    w = drawn_for(weights, cfg)
    raw = json.dumps([cfg.to_json(), text, getattr(w, "digest", None)])
    return hashlib.sha256(raw.encode()).hexdigest()[:24]


def _draw(values: dict, text, weights) -> dict:
    cfg = drawn_config(values, weights)
    return {**gradients_outputs(cfg, text, weights), DRAWN: scene_key(cfg, text, weights)}


def refresh_gradients(values: dict, text, state=None, weights=None, open_tab=None) -> dict:
    """-> the gradient figure, its reading and the per-stack figure; skipped when the attention event drew
    nothing new or the config is bad (the attention handler already warned), and while another tab is open
    (``open_tab``; the tab draws the scene when it is opened, ``open_gradients``)."""
    if open_tab is not None and open_tab != TAB_ID:
        return {k: gr.skip() for k in (*OUTPUTS, DRAWN)}
    return after_the_grid(state, (*OUTPUTS, DRAWN), lambda: _draw(values, text, weights))


def open_gradients(values: dict, text, weights=None, grad_for=None) -> dict:
    """The tab opened: the current scene drawn when the tab shows another (``grad_for``), else a skip."""
    try:
        if scene_key(drawn_config(values, weights), text, weights) == grad_for:
            return {k: gr.skip() for k in (*OUTPUTS, DRAWN)}
    except Exception:  # a bad config: the chain's grid event already warned; the last figures stay
        return {k: gr.skip() for k in (*OUTPUTS, DRAWN)}
    return after_the_grid(None, (*OUTPUTS, DRAWN), lambda: _draw(values, text, weights))


def build(landing: Landing) -> dict:
    first = gradients_outputs(landing.cfg, landing.text, landing.weights)
    out = {}
    with gr.Tab("Gradients", id=TAB_ID) as out["grad_tab"]:
        out[DRAWN] = gr.State(scene_key(landing.cfg, landing.text, landing.weights))
        out["grad_md"] = gr.Markdown(first["grad_md"], elem_id="grad-reading")
        out["grad"] = gr.Plot(first["grad"], label="Gradient norms", elem_id="grad-plot")
        out["grad_stacks"] = stacks.gradient_plot()
    return out


def export(scene) -> list:
    """The Gradients tab's figure (the same path as the page), and a model of several stacks' per-stack norms."""
    fig, _reading, _drawn = gradient_panel(scene.cfg, scene.text, scene.w)
    sections = [("Gradient norms by norm placement", [("gradient-norms", fig)])]
    if scene.maps.stacks:
        sections.append(
            (
                "Gradient norms per stack",
                [("gradient-norms-per-stack", stack_gradient_figure(gradient_norms(scene.cfg, weights=scene.w)))],
            )
        )
    return sections


def wire(page: Page) -> None:
    """Opening this tab draws the controls' scene when it shows another."""
    ui = page.ui
    ui["grad_tab"].select(
        ui.handler(from_committed(weights_switch.with_weights(open_gradients))),
        ui.inputs("committed", "text", DRAWN, *weights_switch.WEIGHTS_IN),
        ui.outputs(*OUTPUTS, DRAWN),
        show_progress="minimal",
        show_progress_on=ui.outputs("grad"),
        api_name="gradients_open",
        concurrency_id="compute",
        **QUIET,
    )


TAB = Tab(
    TAB_ID,
    build,
    steps=(Step("analysis", refresh_gradients, ("text", "state", OPEN), (*OUTPUTS, DRAWN)),),
    wire=wire,
    export=export,
)
