"""Figure of the ``probsparse`` view (no torch): which queries attended, per layer and head."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.figures.base import base_layout, token_axis


def probsparse_figure(view, tokens: list) -> go.Figure:
    """Rows = (layer, head), columns = queries: dark = active (full softmax), light = mean of V."""
    n_l, n_h, L = view.active.shape
    rows = [f"L{i} H{h}" for i in range(n_l) for h in range(n_h)]
    z = view.active.reshape(n_l * n_h, L).astype(int)
    counts = z.sum(-1)
    trace = dict(
        type="heatmap",
        z=z,
        y=rows,
        x=list(range(L)),
        zmin=0,
        zmax=1,
        xgap=1,
        ygap=2,
        colorscale=[[0, "#d9dee4"], [0.5, "#d9dee4"], [0.5, "#1f4e8c"], [1, "#1f4e8c"]],
        customdata=[list(tokens[:L])] * len(rows),
        colorbar=dict(title=dict(text="query"), tickvals=[0.25, 0.75], ticktext=["mean of V", "active"], thickness=14),
        hovertemplate="%{y}, query %{x} '%{customdata}'<br>active: %{z}<extra></extra>",
    )
    rule = (
        "running top-u: active when its max − mean score is among the u largest of the queries so far"
        if view.causal
        else "top-u of max − mean score over the whole sequence"
    )
    title = (
        f"ProbSparse: which queries attend (u = {view.u} of {L}; active per row "
        f"{int(counts.min())}–{int(counts.max())})<br><sup>{rule}; the others output the "
        f"{'running ' if view.causal else ''}mean of V</sup>"
    )
    lay = base_layout(
        title,
        max(340, 34 * len(rows) + 200),
        xaxis=token_axis(list(tokens[:L]), title=dict(text="query (byte) position")),
        yaxis=dict(autorange="reversed", title=dict(text="layer, head"), tickfont=dict(size=13)),
    )
    return go.Figure(data=[trace], layout=lay)


def probsparse_reading(s: dict, view) -> str:
    """The tab's line: active queries per head."""
    flat = [n for row in s["n_active"] for n in row]
    return (
        f"**probsparse**: {min(flat)}–{max(flat)} active queries per head (u = {s['u']}); "
        "the rest output the mean of V."
    )
