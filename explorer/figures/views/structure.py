"""Figures of the ``funnel``, ``feedback`` and ``sandwich`` views (no torch): the sequence length per
layer, the weights that merge the layers into the feedback memory, and the sublayer order."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.figures.base import CYCLE, base_layout, legend_above

SUBLAYER_COLORS = {"a": "#1f4e8c", "f": "#e07b00"}


def funnel_figure(view) -> go.Figure:
    """Query and key positions of every layer's attention: the funnel halves the sequence per block."""
    layers = [f"layer {i}" for i in range(len(view.queries))]
    data = [
        dict(
            type="bar",
            x=layers,
            y=view.queries.tolist(),
            name="queries",
            marker=dict(color=CYCLE[0]),
            hovertemplate="%{x}: %{y} query positions<extra></extra>",
        ),
        dict(
            type="bar",
            x=layers,
            y=view.keys.tolist(),
            name="keys",
            marker=dict(color=CYCLE[1]),
            hovertemplate="%{x}: %{y} key positions<extra></extra>",
        ),
    ]
    title = (
        f"Funnel: sequence length per layer ({view.blocks} blocks, mean-pooled by 2 between blocks)"
        "<br><sup>the first layer of a pooled block attends from the pooled queries to the unpooled keys; "
        "attention cost ∝ queries × keys</sup>"
    )
    lay = base_layout(
        title,
        440,
        barmode="group",
        xaxis=dict(title=dict(text="layer")),
        yaxis=dict(title=dict(text="positions (tokens or pooled groups)"), rangemode="tozero"),
    )
    return go.Figure(data=data, layout=legend_above(lay, data))


def feedback_figure(view) -> go.Figure:
    """One bar per merged state (embedding, layer 1..N): its weight softmax(w) in the memory vector."""
    n = view.weights.shape[0]
    names = ["embedding"] + [f"layer {i}" for i in range(1, n)]
    data = [
        dict(
            type="bar",
            x=names,
            y=view.weights.tolist(),
            marker=dict(color=CYCLE[0]),
            text=[f"{w:.3f}" for w in view.weights],
            textposition="outside",
            textfont=dict(size=14),
            hovertemplate="%{x}: weight %{y:.4f}<extra></extra>",
        )
    ]
    uniform = 1.0 / n
    title = (
        f"Feedback Transformer: how the memory merges the {n} states of a step (softmax over layers, sums to "
        f"{view.weights.sum():.3f})<br><sup>m_t = Σ_l softmax(w)_l · x_t^l; every layer at step t attends to "
        "m_0 .. m_(t−1); uniform (dashed) at initialisation</sup>"
    )
    lay = base_layout(
        title,
        440,
        xaxis=dict(title=dict(text="state merged into the memory (x^0 = embedding)")),
        yaxis=dict(
            title=dict(text="weight softmax(w) (0–1)"), range=[0, max(float(view.weights.max()), uniform) * 1.25]
        ),
        shapes=[
            dict(
                type="line",
                xref="paper",
                x0=0,
                x1=1,
                y0=uniform,
                y1=uniform,
                line=dict(color="#c62828", dash="dash", width=2),
            )
        ],
        annotations=[
            dict(
                text=f"uniform 1/{n}",
                xref="paper",
                x=1,
                y=uniform,
                xanchor="right",
                yanchor="bottom",
                showarrow=False,
                font=dict(color="#c62828"),
            )
        ],
    )
    return go.Figure(data=data, layout=lay)


def sandwich_figure(view) -> go.Figure:
    """A strip of the 2n sublayers bottom (left) to top (right): attention or FFN, and whose weights."""
    n2 = len(view.order)
    z = [[0 if c == "a" else 1 for c in view.order]]
    text = [[f"{c}{j}" for c, j in zip(view.order, view.layer_of)]]
    trace = dict(
        type="heatmap",
        z=z,
        x=list(range(n2)),
        y=["sublayer"],
        zmin=0,
        zmax=1,
        xgap=3,
        colorscale=[
            [0, SUBLAYER_COLORS["a"]],
            [0.5, SUBLAYER_COLORS["a"]],
            [0.5, SUBLAYER_COLORS["f"]],
            [1, SUBLAYER_COLORS["f"]],
        ],
        text=text,
        texttemplate="%{text}",
        textfont=dict(size=18 if n2 <= 24 else 11, color="white"),
        colorbar=dict(tickvals=[0.25, 0.75], ticktext=["attention (a)", "FFN (f)"], thickness=14),
        hovertemplate="depth %{x}: %{text}<extra></extra>",
    )
    n, s = n2 // 2, view.coeff
    title = (
        f"Sandwich transformer: sublayer order {view.order} (n = {n}, s = sandwich_coeff = {s})"
        f"<br><sup>a^s (a f)^(n−s) f^s, bottom (left) to top (right): {s} attention sublayer(s) first, {s} FFN "
        "sublayer(s) last; label = sublayer and whose weights it uses (s = 0: the standard interleaving)</sup>"
    )
    lay = base_layout(
        title,
        300,
        xaxis=dict(title=dict(text="depth (sublayer position, input → output)"), dtick=1),
        yaxis=dict(showticklabels=False, title=dict(text="")),
    )
    return go.Figure(data=[trace], layout=lay)


def funnel_reading(s: dict, view) -> str:
    """The tab's line: positions before and after the funnel."""
    return f"**funnel**: {s['query_len'][0]} → {s['query_len'][-1]} positions over {s['funnel_blocks']} blocks."


def feedback_reading(s: dict, view) -> str:
    """The tab's line: what the feedback memory weighs most."""
    w, top = s["layer_weights"], s["heaviest"]
    what = (
        f"equal weights (1/{len(w)} each, as initialised)"
        if max(w) - min(w) < 1e-4
        else f"the heaviest is {'the embedding' if top == 0 else f'layer {top}'} ({w[top]:.0%})"
    )
    return f"**feedback**: the memory merges the embedding and {len(w) - 1} layer outputs; {what}."


def sandwich_reading(s: dict, view) -> str:
    """The tab's line: the sublayer order."""
    return f"**sandwich**: sublayer order `{s['order']}` (s = {s['sandwich_coeff']})."
