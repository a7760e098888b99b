"""Figure of the ``span`` view (no torch): the learned span of every head against ``max_span``."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.figures.base import CYCLE, base_layout, legend_above


def span_figure(view) -> go.Figure:
    """Learned span z per head (bars grouped by layer) against max_span."""
    n_l, n_h = view.span.shape
    layers = [f"layer {i}" for i in range(n_l)]
    data = [
        dict(
            type="bar",
            x=layers,
            y=view.span[:, h].tolist(),
            name=f"head {h}",
            marker=dict(color=CYCLE[h % len(CYCLE)]),
            hovertemplate=f"%{{x}}, head {h}: span %{{y:.1f}} tokens<extra></extra>",
        )
        for h in range(n_h)
    ]
    title = (
        f"Adaptive span: learned span z per head (max_span = {view.max_span})<br><sup>a key at distance d "
        f"gets weight clamp((R + z − d) / R, 0, 1), R = span_ramp = {view.ramp}; an L1 penalty on z is added "
        "to aux_loss</sup>"
    )
    lay = base_layout(
        title,
        440,
        barmode="group",
        xaxis=dict(title=dict(text="layer")),
        yaxis=dict(title=dict(text="span z (tokens)"), range=[0, view.max_span * 1.12]),
        shapes=[
            dict(
                type="line",
                xref="paper",
                x0=0,
                x1=1,
                y0=view.max_span,
                y1=view.max_span,
                line=dict(color="#c62828", dash="dash", width=2),
            )
        ],
        annotations=[
            dict(
                text=f"max_span = {view.max_span}",
                xref="paper",
                x=1,
                y=view.max_span,
                xanchor="right",
                yanchor="bottom",
                showarrow=False,
                font=dict(color="#c62828"),
            )
        ],
    )
    return go.Figure(data=data, layout=legend_above(lay, data))


def span_reading(s: dict, view) -> str:
    """The tab's line: the range of the learned spans."""
    flat = [x for row in s["span"] for x in row if x is not None]
    return f"**adaptive span**: learned spans {min(flat):.1f}–{max(flat):.1f} tokens (max_span {s['max_span']})."
