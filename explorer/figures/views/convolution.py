"""Figure of the ``lite`` view (no torch): Lite Transformer's convolution taps per head beside the
share of each position's output that comes from the convolution heads."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.base import CYCLE, base_layout, token_axis


def lite_figure(view, tokens: list) -> go.Figure:
    """Left: softmax taps of every convolution head (rows) by offset; right: the convolution share per position."""
    n_l, hc, K = view.taps.shape
    rows = [f"L{i} conv head {c}" for i in range(n_l) for c in range(hc)]
    z = view.taps.reshape(n_l * hc, K)
    data = [
        dict(
            type="heatmap",
            z=z.astype(np.float32),
            x=view.offsets,
            y=rows,
            colorscale="Viridis",
            zmin=0.0,
            zmax=max(float(z.max()), 1e-6),
            xgap=2,
            ygap=2,
            text=np.round(z, 2).astype(str).tolist() if K <= 15 else None,
            texttemplate="%{text}",
            textfont=dict(size=12),
            colorbar=dict(title=dict(text="tap weight", side="top"), thickness=10, x=0.43, xanchor="left"),
            hovertemplate="%{y}: offset %{x}<br>weight %{z:.4f}<extra></extra>",
        )
    ]
    L = view.conv_share.shape[1]
    for i in range(n_l):
        data.append(
            dict(
                type="scatter",
                mode="lines+markers",
                x=list(range(L)),
                y=view.conv_share[i].tolist(),
                xaxis="x2",
                yaxis="y2",
                name=f"layer {i}",
                customdata=tokens[:L],
                marker=dict(size=5),
                line=dict(width=3, color=CYCLE[i % len(CYCLE)]),
                hovertemplate=(
                    f"layer {i}, token %{{x}} '%{{customdata}}'<br>convolution share %{{y:.3f}}<extra></extra>"
                ),
            )
        )
    band = (
        "causal: taps at offsets −(K−1)..0"
        if view.causal
        else f"bidirectional: taps at offsets {view.offsets[0]}..{view.offsets[-1]}"
    )
    mean = view.conv_share.mean()
    title = (
        f"Lite Transformer (LSRA): {view.n_heads - hc} attention heads + {hc} convolution heads of width {K}"
        f" — mean convolution share {mean:.0%}<br><sup>left: softmax of each head's kernel ({band}; edge rows "
        "renormalised)<br>right: share of each position's squared output norm (before the output projection) "
        "from the convolution heads; the attention heads hold the rest</sup>"
    )
    lay = base_layout(
        title,
        max(440, 30 * len(rows) + 240),
        xaxis=dict(domain=[0.0, 0.42], anchor="y", dtick=1, title=dict(text="tap offset (key − query position)")),
        yaxis=dict(domain=[0.0, 1.0], anchor="x", autorange="reversed", title=dict(text="layer, head")),
        xaxis2=dict(token_axis(tokens[:L], title=dict(text="token (byte) position")), domain=[0.56, 1.0], anchor="y2"),
        yaxis2=dict(
            domain=[0.0, 1.0], anchor="x2", range=[0, 1.02], title=dict(text="convolution share of |out|² (0–1)")
        ),
    )
    lay["legend"] = dict(orientation="h", y=-0.22, x=0.78, xanchor="center")
    lay["margin"] = dict(l=130, r=30, t=140, b=110)
    return go.Figure(data=data, layout=lay)


def lite_reading(s: dict, view) -> str:
    """The tab's line: convolution and attention heads, and the convolution's share of the output."""
    share = sum(s["mean_conv_share"]) / len(s["mean_conv_share"])
    return (
        f"**lite**: {s['n_conv_heads']} convolution head(s) of width {s['conv_kernel']} beside "
        f"{s['n_attention_heads']} attention head(s); the convolution carries {share:.0%} of the output on average."
    )
