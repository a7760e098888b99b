"""Figure of the ``groups`` view (no torch): every token coloured by its LSH bucket or cluster, one
row per (layer, head), and ``group_rule``, what a group means for the token's attention."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.figures.base import base_layout, token_axis
from explorer.figures.views.common import discrete_colorscale


def groups_figure(view, tokens: list) -> go.Figure:
    """Rows = (layer, head), columns = tokens, colour = the token's bucket / cluster."""
    n_l, n_h, L = view.labels.shape
    z = view.labels.reshape(n_l * n_h, L)
    rows = [f"L{i} H{h}" for i in range(n_l) for h in range(n_h)]
    text = [[tokens[j] for j in range(L)] for _ in rows] if L <= 128 else None
    G = view.n_groups
    trace = dict(
        type="heatmap",
        z=z,
        y=rows,
        x=list(range(L)),
        colorscale=discrete_colorscale(G),
        zmin=-0.5,
        zmax=G - 0.5,
        xgap=1,
        ygap=2,
        customdata=[[tokens[j] for j in range(L)] for _ in rows],
        colorbar=dict(
            title=dict(text=view.what), tickvals=list(range(G)), ticktext=[str(g) for g in range(G)], thickness=14
        ),
        hovertemplate="%{y}, token %{x} '%{customdata}'<br>" + view.what + " %{z}<extra></extra>",
    )
    if text is not None:
        trace.update(text=text, texttemplate="%{text}", textfont=dict(size=11, color="white"))
    title = (
        f"Tokens coloured by {view.what} (each layer and head; {G} {view.what.split()[-1]}s)"
        f"<br><sup>{group_rule(view)}</sup>"
    )
    lay = base_layout(
        title,
        max(360, 34 * len(rows) + 200),
        xaxis=token_axis(tokens, title=dict(text="token (byte) position")),
        yaxis=dict(autorange="reversed", title=dict(text="layer, head"), tickfont=dict(size=13)),
    )
    return go.Figure(data=[trace], layout=lay)


def group_rule(view) -> str:
    """What a token's group means for its attention (LSH and routing: the keys it may attend;
    clustered attention: whose softmax row it takes)."""
    if view.what == "k-means query cluster":
        return "each query takes its k-means cluster's attention row: the centroid's softmax over all keys"
    if view.key == "buckets":
        return "a query attends only keys of its own bucket (first hash round shown)"
    return f"a query attends only keys of its own {view.what} (query assignment)"


def groups_reading(s: dict, view) -> str:
    """The tab's line: groups per head and the rule a query follows."""
    rule = (
        "each query takes its cluster centroid's attention row over all keys"
        if s["what"] == "k-means query cluster"
        else f"a query attends only keys of its own {s['what']}"
    )
    return f"**{s['what']}s**: {s['n_groups']} per head; {rule}."
