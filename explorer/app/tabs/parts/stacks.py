"""The part of the UI only a model of several stacks has: the separator box and the extra figures.

A model whose arrangement reads a source and a target (an encoder-decoder) reads the text box as
``source <separator> target``; the separator is its own box under the text, shown only for such a
model, so the user sees where the split happens. The other stacks' self-attention, the
cross-attention and the gradient norms per stack are extra figures, filled from the arrangement's
results (``AttentionMaps.stacks``, the ``stack`` column of the gradient norms) and hidden for a
single stack, whose self-attention fills the usual grid. The sweep's axis radio offers the inputs
the arrangement reads.
"""

from __future__ import annotations

import gradio as gr

from explorer.analysis import attention_maps, gradient_norms
from explorer.figures.stacks import extra_grid, map_title, stack_gradient_figure
from explorer.runtime.text import DEFAULT_SEPARATOR, MAX_SEPARATOR_CHARS
from models import registries
from models.architectures import ENCODER_DECODER, arrangement

FIXED_LEN = 64  # the sweep's other inputs (explorer.analysis.cost.sweep's default fixed_len)
# The two extra map slots of the Attention tab: the first cross-attention and the first other stack;
# and the zoom into one of their heads (explorer.app.tabs.parts.stack_zoom), hidden whenever they are redrawn.
FIGURES = ("encoder_grid", "cross_grid", "stack_zoom")
ANALYSIS = ("grad_stacks",)


def separator_box() -> gr.Textbox:
    """The separator control (created inside the caller's Blocks context; hidden until needed)."""
    return gr.Textbox(
        DEFAULT_SEPARATOR,
        label="Source | target separator (encoder-decoder: the text before it is the source, after it the target)",
        elem_id="separator",
        visible=False,
        max_length=MAX_SEPARATOR_CHARS,
        max_lines=1,
    )


def attention_plots() -> dict:
    """The two extra attention figures (inside the Attention tab), hidden until a model of several stacks."""
    return {
        "cross_grid": gr.Plot(None, label="Cross-attention (target x source)", elem_id="cross-grid", visible=False),
        "encoder_grid": gr.Plot(
            None, label="Encoder self-attention (source x source)", elem_id="encoder-grid", visible=False
        ),
    }


def axis_radio() -> gr.Radio:
    """Which input's length a sweep of a model of several inputs varies (the others held at FIXED_LEN)."""
    axes = ("both", *ENCODER_DECODER.inputs)
    return gr.Radio(
        list(axes),
        value="both",
        elem_id="sweep-axis",
        visible=False,
        label=f"Encoder-decoder: vary (the other side fixed at {FIXED_LEN} tokens)",
    )


def gradient_plot() -> gr.Plot:
    return gr.Plot(None, label="Gradient norms per stack", elem_id="grad-stacks", visible=False)


def slot_maps(maps) -> dict:
    """``{slot: AttentionMaps}``: the first cross-attention and the first other stack of ``maps.stacks``."""
    others = maps.stacks or {}
    cross = [m for m in others.values() if m.mask_kind == "full"]
    selfs = [m for m in others.values() if m.mask_kind != "full"]
    return {slot: found[0] for slot, found in (("cross_grid", cross), ("encoder_grid", selfs)) if found}


def attention_updates(cfg, text: str, separator, weights=None) -> dict:
    """``{"cross_grid", "encoder_grid"}`` updates for ``cfg`` (hidden for a single stack, except the maps of a
    ``parallel_hybrid`` layer's mixer, shown in the second slot).

    Raises what ``attention_maps`` raises (a missing separator is a ``ConfigError`` naming it)."""
    hidden = {k: gr.update(visible=False) for k in FIGURES}
    if len(arrangement(cfg).stacks) == 1 and cfg.layer != "parallel_hybrid":
        return hidden
    slots = slot_maps(attention_maps(cfg, text, separator=separator, weights=weights))
    return hidden | {
        slot: gr.update(value=extra_grid(m), visible=True, label=map_title(m)) for slot, m in slots.items()
    }


def box_updates(architecture) -> dict:
    """The separator box and the sweep's axis radio for the chosen architecture key, whatever else the
    controls hold: shown, with the inputs it reads, when it reads several; hidden otherwise."""
    record = registries()["architecture"].get(architecture)
    inputs = record.caps.arrangement.inputs if record is not None else ()
    several = len(inputs) > 1
    return {
        "separator": gr.update(visible=several),
        "sweep_axis": gr.update(visible=several, choices=["both", *inputs] if several else ["both"]),
    }


def analysis_updates(cfg, weights=None) -> dict:
    """The per-stack gradient figure of ``cfg`` (hidden for a single stack)."""
    if len(arrangement(cfg).stacks) == 1:
        return {"grad_stacks": gr.update(visible=False)}
    result = gradient_norms(cfg, weights=weights)
    return {"grad_stacks": gr.update(value=stack_gradient_figure(result), visible=True)}
