"""Figure of the ``memory`` view (no torch): memory slots per layer and segment beside how far back
each query can see, with and without the memory."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.figures.base import CYCLE, base_layout, legend_above, subplot_domains


def memory_figure(view, tokens: list) -> go.Figure:
    """Memory slots per layer and segment | how far back each query can see."""
    n_l, S = view.memory_len.shape
    (xd0, yd0), (xd1, yd1) = subplot_domains(1, 2, hgap=0.1)
    layers = [f"layer {i}" for i in range(n_l)]
    data = []
    for s, (start, n) in enumerate(view.segments):
        shade = 0.35 + 0.65 * (s + 1) / len(view.segments)  # later segments darker: time runs left to right
        color = f"rgba(43, 76, 126, {shade:.2f})"
        hover = [", ".join(f"{k} {v}" for k, v in view.breakdown[i][s].items()) for i in range(n_l)]
        data.append(
            dict(
                type="bar",
                x=layers,
                y=view.memory_len[:, s].tolist(),
                name=f"segment {s}: {start}–{start + n - 1}",
                marker=dict(color=color),
                customdata=hover,
                legendgroup="seg",
                hovertemplate=f"%{{x}}, segment {s}: %{{y}} slots<br>%{{customdata}}<extra></extra>",
            )
        )
    L = view.reach.shape[1]
    same = bool((view.reach == view.reach[0]).all())
    for i in range(1 if same else n_l):
        data.append(
            dict(
                type="scatter",
                mode="lines",
                x=list(range(L)),
                y=view.reach[i].tolist(),
                xaxis="x2",
                yaxis="y2",
                name="reach (all layers)" if same else f"reach, layer {i}",
                line=dict(width=4 if same else 3, color="#1f2933" if same else CYCLE[i % len(CYCLE)]),
                customdata=tokens[:L],
                hovertemplate="query %{x} '%{customdata}': sees %{y} tokens back<extra></extra>",
            )
        )
    data.append(
        dict(
            type="scatter",
            mode="lines",
            x=list(range(L)),
            y=view.local.tolist(),
            xaxis="x2",
            yaxis="y2",
            name="within its own segment only",
            line=dict(color="#9aa5b1", dash="dot", width=2.5),
            hoverinfo="skip",
        )
    )
    bounds = [
        dict(
            type="line",
            xref="x2",
            yref="y2 domain",
            x0=s - 0.5,
            x1=s - 0.5,
            y0=0,
            y1=1,
            line=dict(color="#c0c6cc", width=1, dash="dash"),
        )
        for s, _ in view.segments[1:]
    ]
    seg = view.segments[0][1]
    title = (
        f"{view.memory} memory: {len(view.segments)} segment{'s' if len(view.segments) != 1 else ''}"
        f"{f' of {seg} tokens' if len(view.segments) > 1 else ''} — memory length per layer and reach per query"
        "<br><sup>slots a layer's attention (or kNN store) holds when each segment runs; reach = distance from a "
        "query to the oldest token it can attend</sup>"
    )
    lay = base_layout(
        title,
        500,
        barmode="group",
        shapes=bounds,
        xaxis=dict(domain=xd0, anchor="y", title=dict(text="layer")),
        yaxis=dict(domain=yd0, anchor="x", title=dict(text="memory length (slots)")),
        xaxis2=dict(domain=xd1, anchor="y2", title=dict(text="query position (token index)"), rangemode="tozero"),
        yaxis2=dict(domain=yd1, anchor="x2", title=dict(text="reach (tokens back)"), rangemode="tozero"),
    )
    lay["margin"] = dict(l=80, r=30, t=100, b=60)
    return go.Figure(data=data, layout=legend_above(lay, data))


def memory_reading(s: dict, view) -> str:
    """The tab's line: segments and the farthest reach, with and without the memory."""
    far = max(max(r) for r in s["reach"])
    return (
        f"**{s['memory']} memory**: {len(s['segments'])} segment(s); the farthest query sees "
        f"{far} tokens back (without memory: {max(s['reach_without_memory'])})."
    )
