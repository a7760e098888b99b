"""The encoder-decoder's part of the UI: the separator box and the figures only it has.

An encoder-decoder reads the text box as ``source <separator> target``; the separator is its own
box under the text (shown only for ``architecture="encoder_decoder"``) so the user sees where the
split happens and can change it when the text needs the default one. The encoder's and the
cross-attention maps, and the gradient norms per stack, are extra figures that stay hidden for
the single-stack architectures (the decoder's self-attention fills the usual attention grid).
"""
from __future__ import annotations

import gradio as gr

from explorer.analysis import experiments as ex
from explorer.analysis import seq2seq as encdec
from explorer.analysis.seq2seq import SEQ2SEQ_AXES
from explorer.figures import seq2seq as plots_encdec

FIXED_LEN = 64  # the sweep's other side (explorer.analysis.sweep's default fixed_len)

SEQ2SEQ_TEXT = "the quick brown fox=>xof nworb kciuq eht"  # reverse: the alignment is the anti-diagonal
FIGURES = ("encoder_grid", "cross_grid")
ANALYSIS = ("grad_stacks",)


def separator_box() -> gr.Textbox:
    """The separator control (created inside the caller's Blocks context; hidden until needed)."""
    return gr.Textbox(encdec.DEFAULT_SEPARATOR, label="Source | target separator (encoder-decoder: the text "
                      "before it is the source, after it the target)", elem_id="separator", visible=False,
                      max_length=encdec.MAX_SEPARATOR_CHARS, max_lines=1)


def attention_plots() -> dict:
    """The two extra attention figures (inside the Attention tab), hidden until an encoder-decoder."""
    return {"cross_grid": gr.Plot(None, label="Cross-attention (target x source)", elem_id="cross-grid",
                                  visible=False),
            "encoder_grid": gr.Plot(None, label="Encoder self-attention (source x source)", elem_id="encoder-grid",
                                    visible=False)}


def axis_radio() -> gr.Radio:
    """Which length an encoder-decoder's latency / memory sweep varies (the other held at FIXED_LEN)."""
    return gr.Radio(list(SEQ2SEQ_AXES), value="both", elem_id="sweep-axis", visible=False,
                    label=f"Encoder-decoder: vary (the other side fixed at {FIXED_LEN} tokens)")


def gradient_plot() -> gr.Plot:
    return gr.Plot(None, label="Gradient norms per stack", elem_id="grad-stacks", visible=False)


def separator(value) -> str:
    """The separator box's value; an empty box means the default."""
    return encdec.DEFAULT_SEPARATOR if value in (None, "") else value


def attention_updates(cfg, text: str, sep) -> dict:
    """``{"cross_grid", "encoder_grid", "separator"}`` updates for ``cfg`` (hidden unless encoder-decoder).

    Raises what ``attention_maps`` raises (a missing separator is a ``ConfigError`` naming it)."""
    if not encdec.is_seq2seq(cfg):
        return {k: gr.update(visible=False) for k in FIGURES} | {"separator": gr.update(visible=False)}
    maps = ex.attention_maps(cfg, text, separator=separator(sep))
    return {"cross_grid": gr.update(value=plots_encdec.cross_grid(maps), visible=True),
            "encoder_grid": gr.update(value=plots_encdec.encoder_grid(maps), visible=True),
            "separator": gr.update(visible=True)}


def analysis_updates(cfg) -> dict:
    """The per-stack gradient figure of ``cfg`` (hidden unless encoder-decoder)."""
    if not encdec.is_seq2seq(cfg):
        return {"grad_stacks": gr.update(visible=False)}
    result = ex.gradient_norms(cfg)
    return {"grad_stacks": gr.update(value=plots_encdec.stack_gradient_figure(result), visible=True)}
