"""Figure of the ``retrieval`` view (no torch): the neighbours kNN-LM / SPALM retrieved for each
position, and the probability of the output's top token with and without the memory."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.base import base_layout, token_axis
from explorer.figures.views.common import panel_title
from explorer.runtime.tokens import token_label


def retrieval_figure(view, tokens: list) -> go.Figure:
    """Top: the neighbours of each position (rank x position; colour = distance, text = stored next token);
    bottom: probability of the output's top token under the model, the memory and the mix, and the memory weight."""
    L, k = view.next.shape
    labels = [[token_label(int(t)) if t >= 0 else "" for t in row] for row in view.next.T]  # (k, L)
    hover = [
        [
            (
                f"stored next '{labels[r][j]}' (context at position {int(view.pos[j, r])})"
                if view.next[j, r] >= 0
                else "no entry"
            )
            for j in range(L)
        ]
        for r in range(k)
    ]
    dist = np.where(np.isfinite(view.dist), view.dist, np.nan).T  # (k, L)
    finite = dist[np.isfinite(dist)]
    trace = dict(
        type="heatmap",
        z=dist.astype(np.float32),
        x=list(range(L)),
        y=[f"#{r + 1}" for r in range(k)],
        colorscale="Viridis_r",
        zmin=float(finite.min()) if finite.size else 0.0,
        zmax=float(finite.max()) if finite.size else 1.0,
        hoverongaps=False,
        xgap=1,
        ygap=1,
        customdata=hover,
        colorbar=dict(title=dict(text="squared<br>distance", side="top"), thickness=10, y=0.78, len=0.42),
        hovertemplate="query %{x}, neighbour %{y}: distance %{z:.3f}<br>%{customdata}<extra></extra>",
    )
    if L <= 128:  # one character per cell still reads at this width
        trace.update(text=labels, texttemplate="%{text}", textfont=dict(size=11 if L <= 80 else 9, color="white"))
    data = [trace]
    probs = view.top_probs()
    styles = {
        "model": ("model alone", "#1f77b4", "solid"),
        "memory": ("memory alone", "#2ca02c", "dot"),
        "mixed": ("mixed (output)", "#1f2933", "solid"),
    }
    top = [token_label(int(t)) for t in view.top]
    for name, (label, color, dash) in styles.items():
        y = [None if not np.isfinite(v) else float(v) for v in probs[name]]
        data.append(
            dict(
                type="scatter",
                mode="lines",
                x=list(range(L)),
                y=y,
                xaxis="x2",
                yaxis="y2",
                name=label,
                line=dict(color=color, dash=dash, width=3),
                customdata=top,
                hovertemplate=f"position %{{x}}: P('%{{customdata}}') {label} %{{y:.3f}}<extra></extra>",
            )
        )
    weight = "λ = knn_lambda" if view.memory == "knn_lm" else "1 − g (learned gate)"
    data.append(
        dict(
            type="scatter",
            mode="lines",
            x=list(range(L)),
            y=view.mix.tolist(),
            xaxis="x2",
            yaxis="y2",
            name=f"memory weight {weight}",
            line=dict(color="#c62828", dash="dash", width=2.5),
            hovertemplate="position %{x}: memory weight %{y:.3f}<extra></extra>",
        )
    )
    s = view.summary()
    rule = (
        "p = λ·p_kNN + (1 − λ)·p_LM, p_kNN = Σ softmax(−distance) over the neighbours' stored next tokens"
        if view.memory == "knn_lm"
        else "z = g·h + (1 − g)·m, m = attention of h over the neighbours' next-token embeddings; memory alone = g = 0"
    )
    title = (
        f"{view.memory}: the {k} nearest stored contexts of each position — {s['positions_with_neighbours']} of {L} "
        f"positions retrieve, the top token changes at {s['top_changed']}<br><sup>{rule}; the store fills after "
        f"each segment of {view.segment_len} tokens, so the first segment has no neighbours</sup>"
    )
    lay = base_layout(
        title,
        620,
        xaxis=dict(token_axis(tokens[:L]), domain=[0, 1], anchor="y", title=dict(text="")),
        yaxis=dict(domain=[0.6, 1.0], anchor="x", autorange="reversed", title=dict(text="neighbour rank")),
        xaxis2=dict(
            token_axis(tokens[:L], title=dict(text="query (byte) position")), domain=[0, 1], anchor="y2", matches="x"
        ),
        yaxis2=dict(domain=[0.0, 0.44], anchor="x2", range=[0, 1.02], title=dict(text="probability (0–1)")),
    )
    lay["annotations"] = [
        panel_title("neighbours of each query: text = stored next token, colour = distance", [0, 1], 1.0),
        panel_title(
            "probability of the output's most likely next token; dashed red: the memory's weight", [0, 1], 0.445
        ),
    ]
    lay["legend"] = dict(orientation="h", y=-0.16, x=0.5, xanchor="center")
    lay["margin"] = dict(l=90, r=30, t=140, b=110)
    return go.Figure(data=data, layout=lay)


def retrieval_reading(s: dict, view) -> str:
    """The tab's line: neighbours retrieved and where they change the top next token (or why none yet)."""
    if s["positions_with_neighbours"]:
        return (
            f"**{s['memory']}**: {s['positions_with_neighbours']} positions retrieve {s['knn_k']} neighbours; "
            f"the memory changes the top next token at {s['top_changed']}."
        )
    return (
        f"**{s['memory']}**: the store is empty until the first segment ({s['segment_len']} tokens) "
        "has passed: use a longer text or a smaller segment_len to see neighbours."
    )
