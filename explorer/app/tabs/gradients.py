"""The Gradients tab: per-layer gradient norms of every norm placement, filled in the chain's analysis stage.

``gradient_panel`` draws the figure and its reading (``explorer.analysis.gradients.norms.drawn_gradients``, the
path the export and ``/gradients`` take too: every norm placement, the weights drawn for the placement
they belong to, the others at initialisation; a pretrained checkpoint's own placement on its loss on the
text); on a bundled model with a post-LN twin, Theorem 1's depth-scaling panel stands above the profile
(``parts.gradients_depth``). A model of several stacks adds its per-stack figure. Skipped when the grid
event drew nothing new.
"""

from __future__ import annotations

import gradio as gr

from explorer.analysis import gradient_norms
from explorer.analysis.gradients.norms import drawn_gradients
from explorer.analysis.source import drawn_for
from explorer.app.controls.state import after_the_grid, drawn_config
from explorer.app.tabs.contract import Landing, Step, Tab
from explorer.app.tabs.parts import stacks
from explorer.app.tabs.parts.gradients_depth import depth_panel
from explorer.figures.gradients import gradient_figure
from explorer.figures.readings import gradient_reading
from explorer.figures.stacks import stack_gradient_figure
from models import ModelConfig

OUTPUTS = ("grad", "grad_md", *stacks.ANALYSIS)


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


def refresh_gradients(values: dict, text, state=None, weights=None) -> dict:
    """-> the gradient figure, its reading and the per-stack figure; skipped when the attention event drew
    nothing new or the config is bad (the attention handler already warned)."""
    return after_the_grid(state, OUTPUTS, lambda: gradients_outputs(drawn_config(values, weights), text, weights))


def build(landing: Landing) -> dict:
    first = gradients_outputs(landing.cfg, landing.text, landing.weights)
    out = {}
    with gr.Tab("Gradients", id="gradients"):
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


TAB = Tab("gradients", build, steps=(Step("analysis", refresh_gradients, ("text", "state"), OUTPUTS),), export=export)
