"""Variant views -> Plotly figures (no torch). Inputs are ``explorer.analysis.views`` results (numpy
arrays), styled like ``explorer.figures.base`` so they project well; one module per view concept,
named like its counterpart in ``explorer.analysis.views``.

``view_figures`` draws every view present, ``PLOT_NAMES`` lists every figure it can return (the
approximation view gives two), in the order the "Variant views" tab lays them out; ``views_reading`` is the
tab's text, one line per view present, each read by the function beside its figure (``READINGS``);
``approximation_figure`` (one layer and head, for the tab's pickers) and ``error_note`` (what a
large approximation error means) are the entry points the tab reads besides.
"""

from __future__ import annotations

from explorer.figures.views.active_queries import probsparse_figure, probsparse_reading
from explorer.figures.views.approximation import (
    approximation_figure,
    approximation_reading,
    approximation_table,
    error_note,
)
from explorer.figures.views.convolution import lite_figure, lite_reading
from explorer.figures.views.depth import act_reading, depth_figure, exit_reading
from explorer.figures.views.experts import experts_figure, experts_reading
from explorer.figures.views.groups import groups_figure, groups_reading
from explorer.figures.views.memory import memory_figure, memory_reading
from explorer.figures.views.mixing import head_mix_figure, head_mix_reading, prior_figure, prior_reading
from explorer.figures.views.product_keys import slot_figure, slot_reading
from explorer.figures.views.retrieval import retrieval_figure, retrieval_reading
from explorer.figures.views.sorting import sinkhorn_figure, sinkhorn_reading
from explorer.figures.views.spans import span_figure, span_reading
from explorer.figures.views.structure import (
    feedback_figure,
    feedback_reading,
    funnel_figure,
    funnel_reading,
    sandwich_figure,
    sandwich_reading,
)
from explorer.figures.views.two_step import induced_figure, induced_reading

__all__ = ["PLOT_NAMES", "READINGS", "approximation_figure", "error_note", "view_figures", "views_reading"]

# view name -> its figure, after the approximation's two, in the order of ``explorer.analysis.views.VIEWS``
FIGURES = {
    "groups": groups_figure,
    "span": span_figure,
    "experts": experts_figure,
    "memory": memory_figure,
    "exit": depth_figure,
    "act": depth_figure,
    "sinkhorn": sinkhorn_figure,
    "probsparse": probsparse_figure,
    "talking_heads": head_mix_figure,
    "residual": prior_figure,
    "pkm": slot_figure,
    "funnel": funnel_figure,
    "induced": induced_figure,
    "lite": lite_figure,
    "retrieval": retrieval_figure,
    "feedback": feedback_figure,
    "sandwich": sandwich_figure,
}
# the figures drawn from (view, token labels); the others from the view alone
WITH_TOKENS = {"groups", "experts", "memory", "exit", "act", "probsparse", "induced", "lite", "retrieval"}

PLOT_NAMES = ("approximation", "approximation_table", *FIGURES)

# view name -> its line of the tab's reading, ``fn(summary, view)``, beside its figure
READINGS = {
    "approximation": approximation_reading,
    "groups": groups_reading,
    "span": span_reading,
    "experts": experts_reading,
    "memory": memory_reading,
    "exit": exit_reading,
    "act": act_reading,
    "sinkhorn": sinkhorn_reading,
    "probsparse": probsparse_reading,
    "talking_heads": head_mix_reading,
    "residual": prior_reading,
    "pkm": slot_reading,
    "funnel": funnel_reading,
    "induced": induced_reading,
    "lite": lite_reading,
    "retrieval": retrieval_reading,
    "feedback": feedback_reading,
    "sandwich": sandwich_reading,
}


def view_figures(views, layer: int = 0, head: int = 0) -> dict:
    """``{plot name: figure}`` for every view present (the approximation gives two)."""
    figs = {}
    for name, view in views.items.items():
        if name == "approximation":
            figs["approximation"] = approximation_figure(view, views.tokens, layer, head)
            figs["approximation_table"] = approximation_table(view)
        elif name in FIGURES:
            figs[name] = FIGURES[name](view, views.tokens) if name in WITH_TOKENS else FIGURES[name](view)
    return figs


def views_reading(views) -> str:
    """The "Variant views" tab's text: one line per view present (what is shown and its headline number),
    in the order of ``explorer.analysis.views.VIEWS``."""
    return "\n\n".join(READINGS[name](view.summary(), view) for name, view in views.items.items())
