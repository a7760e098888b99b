"""Figures of the ``talking_heads`` and ``residual`` views (no torch): the head-mixing matrices of
every layer, and the share of each layer's scores that comes from the previous layer."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.base import CYCLE, base_layout, legend_above, subplot_domains
from explorer.figures.views.common import panel_title


def head_mix_figure(view) -> go.Figure:
    """Per layer: the pre-softmax and post-softmax [h, h] mixing matrices side by side (diverging colours)."""
    n_l, h, _ = view.pre.shape
    doms = subplot_domains(n_l, 2, hgap=0.12, vgap=0.16)
    lim = max(1.0, float(np.abs(view.pre).max()), float(np.abs(view.post).max()))
    data, layout, notes = [], {}, []
    for i in range(n_l):
        for c, (m, name) in enumerate(
            ((view.pre[i], "scores, before softmax"), (view.post[i], "weights, after softmax"))
        ):
            p = 2 * i + c
            s = "" if p == 0 else str(p + 1)
            xd, yd = doms[p]
            data.append(
                dict(
                    type="heatmap",
                    z=m.astype(np.float32),
                    x=list(range(h)),
                    y=list(range(h)),
                    xaxis=f"x{s}",
                    yaxis=f"y{s}",
                    coloraxis="coloraxis",
                    xgap=2,
                    ygap=2,
                    text=np.round(m, 2).astype(str).tolist() if h <= 8 else None,
                    texttemplate="%{text}",
                    textfont=dict(size=14),
                    hovertemplate=(
                        f"layer {i}, {name}<br>new head %{{y}} ← old head %{{x}}: %{{z:.3f}}<extra></extra>"
                    ),
                )
            )
            layout[f"xaxis{s}"] = dict(
                domain=xd,
                anchor=f"y{s}",
                dtick=1,
                showgrid=False,
                constrain="domain",
                title=dict(text="old head (mixed in)" if i == n_l - 1 else ""),
            )
            layout[f"yaxis{s}"] = dict(
                domain=yd,
                anchor=f"x{s}",
                dtick=1,
                autorange="reversed",
                showgrid=False,
                scaleanchor=f"x{s}",
                constrain="domain",
                title=dict(text="new head" if c == 0 else ""),
            )
            notes.append(panel_title(f"layer {i}: {name}", xd, yd[1]))
    off = view.summary()["max_off_identity"]
    title = (
        f"Talking heads: learned [{h}, {h}] head-mixing matrices per layer — max |W − I| = {off:.3g}"
        "<br><sup>row n: how much of each head's scores (left) / attention weights (right) head n uses; "
        "identity at initialisation = plain full attention</sup>"
    )
    lay = base_layout(title, max(420, 320 * n_l + 140), annotations=notes, **layout)
    lay["coloraxis"] = dict(
        colorscale="RdBu",
        cmid=0.0,
        cmin=-lim,
        cmax=lim,
        reversescale=True,
        colorbar=dict(title=dict(text="weight", side="top"), thickness=12),
    )
    lay["margin"] = dict(l=70, r=70, t=120, b=60)
    return go.Figure(data=data, layout=lay)


def prior_figure(view) -> go.Figure:
    """Bars per layer (one per head): the previous layer's share of the scores; predictive's alpha as a line."""
    n_l, h = view.share.shape
    layers = [f"layer {i}" for i in range(n_l)]
    data = [
        dict(
            type="bar",
            x=layers,
            y=view.share[:, j].tolist(),
            name=f"head {j}",
            marker=dict(color=CYCLE[j % len(CYCLE)]),
            hovertemplate=f"%{{x}}, head {j}: prior share %{{y:.3f}}<extra></extra>",
        )
        for j in range(h)
    ]
    if np.isfinite(view.alpha).any():
        data.append(
            dict(
                type="scatter",
                mode="lines+markers",
                x=layers,
                y=[None if not np.isfinite(a) else float(a) for a in view.alpha],
                name="alpha = sigmoid(a)",
                line=dict(color="#c62828", width=3, dash="dash"),
                marker=dict(size=10),
                hovertemplate="%{x}: alpha %{y:.3f}<extra></extra>",
            )
        )
    what = (
        "previous layer's accumulated scores S_(l−1)"
        if view.attention == "realformer"
        else "alpha · Conv(previous layer's attention maps)"
    )
    title = (
        f"{view.attention}: share of each layer's pre-softmax scores that comes from the previous layer"
        f"<br><sup>share = |prior| / (|prior| + |own|), Frobenius norms over the allowed pairs; prior = {what}; "
        "layer 0 has no previous layer</sup>"
    )
    lay = base_layout(
        title,
        440,
        barmode="group",
        xaxis=dict(title=dict(text="layer")),
        yaxis=dict(title=dict(text="share of the scores (0–1)"), range=[0, 1.05]),
    )
    return go.Figure(data=data, layout=legend_above(lay, data))


def head_mix_reading(s: dict, view) -> str:
    """The tab's line: how far the head-mixing matrices are from the identity."""
    return f"**talking heads**: head-mixing matrices differ from the identity by at most {s['max_off_identity']:.3g}."


def prior_reading(s: dict, view) -> str:
    """The tab's line: the largest share of a layer's scores from the previous layer."""
    top = max(x for row in s["prior_share"] for x in row)
    return f"**{s['attention']}**: up to {top:.0%} of a layer's scores come from the previous layer."
