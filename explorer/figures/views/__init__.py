"""Variant views -> Plotly figures (no torch). Inputs are ``explorer.analysis.views`` results (numpy
arrays), styled like ``explorer.figures.base`` so they project well; one module per view concept,
named like its counterpart in ``explorer.analysis.views``.

``view_figures`` draws every view present, ``PLOT_NAMES`` lists every figure it can return (the
approximation view gives two), in the order the "Variant views" tab lays them out;
``approximation_figure`` (one layer and head, for the tab's pickers) and ``error_note`` (what a
large approximation error means) are the entry points the tab reads besides.
"""
from __future__ import annotations

from explorer.figures.views.active_queries import probsparse_figure
from explorer.figures.views.approximation import approximation_figure, approximation_table, error_note
from explorer.figures.views.convolution import lite_figure
from explorer.figures.views.depth import depth_figure
from explorer.figures.views.experts import experts_figure
from explorer.figures.views.groups import groups_figure
from explorer.figures.views.memory import memory_figure
from explorer.figures.views.mixing import head_mix_figure, prior_figure
from explorer.figures.views.product_keys import slot_figure
from explorer.figures.views.retrieval import retrieval_figure
from explorer.figures.views.sorting import sinkhorn_figure
from explorer.figures.views.spans import span_figure
from explorer.figures.views.structure import feedback_figure, funnel_figure, sandwich_figure
from explorer.figures.views.two_step import induced_figure

__all__ = ["PLOT_NAMES", "approximation_figure", "error_note", "view_figures"]

# view name -> its figure, after the approximation's two, in the order of ``explorer.analysis.views.VIEWS``
FIGURES = {"groups": groups_figure, "span": span_figure, "experts": experts_figure, "memory": memory_figure,
           "exit": depth_figure, "act": depth_figure, "sinkhorn": sinkhorn_figure, "probsparse": probsparse_figure,
           "talking_heads": head_mix_figure, "residual": prior_figure, "pkm": slot_figure, "funnel": funnel_figure,
           "induced": induced_figure, "lite": lite_figure, "retrieval": retrieval_figure,
           "feedback": feedback_figure, "sandwich": sandwich_figure}
# the figures drawn from (view, token labels); the others from the view alone
WITH_TOKENS = {"groups", "experts", "memory", "exit", "act", "probsparse", "induced", "lite", "retrieval"}

PLOT_NAMES = ("approximation", "approximation_table", *FIGURES)


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
