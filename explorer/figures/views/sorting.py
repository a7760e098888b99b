"""Figure of the ``sinkhorn`` view (no torch): the learned block sorting matrix of every layer and head."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.base import base_layout, subplot_domains
from explorer.figures.views.common import panel_title


def sinkhorn_figure(view) -> go.Figure:
    """One [nb, nb] heatmap per (layer, head): query block (rows) x key block sorted next to it (columns)."""
    n_l, n_h, nb, _ = view.P.shape
    doms = subplot_domains(n_l, n_h, hgap=0.06, vgap=0.14)
    data, layout, notes = [], {}, []
    for i in range(n_l):
        for h in range(n_h):
            p = i * n_h + h
            s = "" if p == 0 else str(p + 1)
            xd, yd = doms[p]
            data.append(
                dict(
                    type="heatmap",
                    z=view.P[i, h].astype(np.float32),
                    x=list(range(nb)),
                    y=list(range(nb)),
                    xaxis=f"x{s}",
                    yaxis=f"y{s}",
                    coloraxis="coloraxis",
                    xgap=1,
                    ygap=1,
                    hovertemplate=(
                        f"layer {i}, head {h}<br>query block %{{y}} ← key block %{{x}}"
                        "<br>weight %{z:.3f}<extra></extra>"
                    ),
                )
            )
            layout[f"xaxis{s}"] = dict(
                domain=xd,
                anchor=f"y{s}",
                dtick=1,
                showgrid=False,
                constrain="domain",
                title=dict(text="key block (sorted in)" if i == n_l - 1 else ""),
            )
            layout[f"yaxis{s}"] = dict(
                domain=yd,
                anchor=f"x{s}",
                dtick=1,
                autorange="reversed",
                showgrid=False,
                scaleanchor=f"x{s}",
                constrain="domain",
                title=dict(text="query block" if h == 0 else ""),
            )
            notes.append(panel_title(f"layer {i}, head {h}", xd, yd[1]))
    s = view.summary()
    rule = (
        "causal: only strictly earlier blocks; every row after block 0 sums to 1"
        if view.causal
        else f"rows sum to 1; columns to 1 up to convergence (max |column sum − 1| = {s['max_col_sum_error']:.3g})"
    )
    title = (
        f"Sinkhorn attention: learned block sorting P ({nb} blocks of {view.block_size} tokens, "
        f"{view.iters} Sinkhorn iterations)<br><sup>row a: how much of each key block is soft-sorted next to "
        f"query block a; {rule}</sup>"
    )
    lay = base_layout(title, max(420, 300 * n_l + 140), annotations=notes, **layout)
    # scaled to the largest weight: an untrained P is near uniform (1 / nb) and would be one colour on [0, 1]
    lay["coloraxis"] = dict(
        colorscale="Viridis",
        cmin=0.0,
        cmax=max(float(view.P.max()), 1e-6),
        colorbar=dict(title=dict(text="weight", side="top"), thickness=12),
    )
    lay["margin"] = dict(l=70, r=70, t=120, b=60)
    return go.Figure(data=data, layout=lay)


def sinkhorn_reading(s: dict, view) -> str:
    """The tab's line: blocks sorted and how doubly stochastic the sorting is."""
    return (
        f"**sinkhorn**: a soft sorting of {s['n_blocks']} key blocks per head; max |row sum − 1| "
        f"{s['max_row_sum_error']:.2g}, max |column sum − 1| {s['max_col_sum_error']:.2g}."
    )
