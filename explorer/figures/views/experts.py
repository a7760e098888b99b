"""Figure of the ``experts`` view (no torch): the expert load of every layer, its capacity and drops,
above the top-1 expert of each token in the same colours."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.figures.base import base_layout, token_axis
from explorer.figures.views.common import GROUP_COLORS, discrete_colorscale, panel_title


def experts_figure(view, tokens: list) -> go.Figure:
    """One expert-load histogram per layer (colour = expert, capacity dashed, dropped count in the panel
    title) above each token's top-1 expert in the same colours."""
    n_l, E = view.counts.shape
    cols = min(n_l, 4)
    rows = -(-n_l // cols)
    top = 0.42  # the histograms live above this fraction of the figure, the token strip below
    hist_h = (1 - top) / rows
    colors = [GROUP_COLORS[e % len(GROUP_COLORS)] for e in range(E)]
    cap = view.capacity[0]
    n_seq = max(1, view.n_tokens // view.assignment.shape[1])
    data, layout, notes, shapes = [], {}, [], []
    names = [f"layer {j}" for j in view.layers]  # ExpertView fills it (every layer, or the routed ones)
    for i in range(n_l):
        r, c = divmod(i, cols)
        s = "" if i == 0 else str(i + 1)
        xd = [c / cols + 0.012, (c + 1) / cols - 0.012]
        yd = [1 - (r + 1) * hist_h + 0.06, 1 - r * hist_h - 0.035]
        data.append(
            dict(
                type="bar",
                x=list(range(E)),
                y=view.counts[i].tolist(),
                marker=dict(color=colors),
                xaxis=f"x{s}",
                yaxis=f"y{s}",
                name=names[i],
                showlegend=False,
                hovertemplate=f"{names[i]}, expert %{{x}}: %{{y}} assignments<extra></extra>",
            )
        )
        layout[f"xaxis{s}"] = dict(domain=xd, anchor=f"y{s}", dtick=1, title=dict(text="expert", standoff=2))
        layout[f"yaxis{s}"] = dict(
            domain=yd,
            anchor=f"x{s}",
            matches="y" if i else None,
            rangemode="tozero",
            showticklabels=c == 0,
            title=dict(text="tokens" if c == 0 else ""),
        )
        notes.append(panel_title(f"{names[i]}: {int(view.dropped[i])} dropped", xd, yd[1]))
        if cap is not None:
            shapes.append(
                dict(
                    type="line",
                    xref=f"x{s} domain",
                    yref=f"y{s}",
                    x0=0,
                    x1=1,
                    y0=cap * n_seq,
                    y1=cap * n_seq,
                    line=dict(color="#c62828", dash="dash", width=2),
                )
            )
    L = view.assignment.shape[1]
    s = str(n_l + 1)
    data.append(
        dict(
            type="heatmap",
            z=view.assignment,
            x=list(range(L)),
            y=names,
            xaxis=f"x{s}",
            yaxis=f"y{s}",
            colorscale=discrete_colorscale(E),
            zmin=-0.5,
            zmax=E - 0.5,
            xgap=1,
            ygap=2,
            customdata=[tokens[:L]] * n_l,
            colorbar=dict(
                title=dict(text="top-1<br>expert"),
                tickvals=list(range(E)),
                thickness=12,
                y=top / 2 - 0.04,
                len=top - 0.1,
            ),
            hovertemplate="%{y}, token %{x} '%{customdata}'<br>expert %{z}<extra></extra>",
        )
    )
    layout[f"xaxis{s}"] = dict(
        token_axis(tokens[:L], title=dict(text="token (byte) position")), domain=[0, 1], anchor=f"y{s}"
    )
    layout[f"yaxis{s}"] = dict(domain=[0.0, top - 0.12], anchor=f"x{s}", autorange="reversed")
    notes.append(panel_title("top-1 expert of each token", [0, 1], top - 0.11))
    total = int(view.dropped.sum())
    cap_text = (
        f"capacity {cap} per expert per sequence (dashed); a dropped token skips the FFN through the residual"
        if cap is not None
        else "a fixed hash of the token id: no router, no capacity"
        if view.ffn == "hash"
        else "dropless routing: no capacity, every assignment kept"
    )
    if names != [f"layer {j}" for j in range(n_l)]:  # a schedule's dense layers are left out
        cap_text += f"; routed layers only ({', '.join(n.split()[1] for n in names)})"
    title = (
        f"{view.ffn}: expert load per layer — {total} of {view.n_tokens * view.top_k * n_l} assignments dropped"
        f"<br><sup>top-{view.top_k} routing of {view.n_tokens} tokens per layer; {cap_text}</sup>"
    )
    return go.Figure(data=data, layout=base_layout(title, 460 + 240 * rows, annotations=notes, shapes=shapes, **layout))


def experts_reading(s: dict, view) -> str:
    """The tab's line: assignments dropped over capacity."""
    return (
        f"**{s['ffn']}**: {sum(s['dropped'])} assignments dropped over capacity across "
        f"{len(s['dropped'])} layers (top-{s['top_k']})."
    )
